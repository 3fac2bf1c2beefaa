// Dropout: native_dropout draws its keep mask from the device's default generator (the schema
// has no Generator argument), so the mask is reproducible under torch.manual_seed, and
// native_dropout_backward reapplies it. Like the CPU kernel, the output is input * mask * scale
// (a NaN input stays NaN even where dropped) with scale = 1 / (1 - p), or 0 when p == 1.
#include <c10/util/Exception.h>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/random_bits.h"

namespace torchtpu::lowering {
namespace {

double keep_scale(double p) { return p >= 1 ? 0.0 : 1.0 / (1.0 - p); }

// x * mask * scale in the result's dtype (a bool gradient gives a float result), with the
// scale applied in f32 for half types (the CPU kernel's opmath).
Value apply_mask(FunctionBuilder& b, Value x, Value mask, double scale, const TensorType& out) {
  ElementType ct = opmath_type(out.dtype);
  Value xc = b.convert(x, ct);
  Value y = b.mul(b.mul(xc, b.convert(mask, ct)), b.constant(scale, xc.type));
  return coerce(b, y, out);
}

// native_dropout(input, p, train) -> (output, mask)
std::vector<Value> lower_native_dropout(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  double p = ctx.double_arg(1);
  bool train = ctx.is_none(2) || ctx.bool_arg(2);
  const TensorType& out = ctx.out_type(0);
  const TensorType& mask_t = ctx.out_type(1);
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (!train || x.type.numel() == 0 || p == 0) {
    return {coerce(b, x, out),
            coerce(b, b.constant(1, TensorType(ElementType::kPred, {})), mask_t)};
  }
  if (p == 1) {
    // Everything dropped; x * 0 keeps CPU's NaN * 0 = NaN.
    Value none = b.broadcast_to(b.constant(0, TensorType(ElementType::kPred, {})), x.shape());
    return {apply_mask(b, x, none, 0.0, out), coerce(b, none, mask_t)};
  }
  // Keep where u < 1 - p with u uniform on [0, 1) at f32 resolution: exactly bernoulli(1 - p)
  // as the CPU kernel draws it (p == 0 keeps everything, p == 1 nothing).
  Value u = uniform01_from_state(b, ctx.rng_state(), x.shape(), ElementType::kF32, 24);
  Value keep = b.compare(u, b.constant(1.0 - p, u.type), shlo::CompareDirection::kLT);
  return {apply_mask(b, x, keep, keep_scale(p), out), coerce(b, keep, mask_t)};
}

// native_dropout_backward(grad_output, mask, scale)
std::vector<Value> lower_native_dropout_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  return {apply_mask(b, ctx.tensor(0), ctx.tensor(1), ctx.double_arg(2), ctx.out_type())};
}

TORCHTPU_LOWERING("aten::native_dropout", lower_native_dropout);
TORCHTPU_LOWERING("aten::native_dropout_backward", lower_native_dropout_backward);

}  // namespace
}  // namespace torchtpu::lowering
