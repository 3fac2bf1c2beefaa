// Dropout: native_dropout draws its keep mask from the device's default generator (the schema
// has no Generator argument), so the mask is reproducible under torch.manual_seed, and
// native_dropout_backward reapplies it. Like the CPU kernel, the output is input * mask * scale
// (a NaN input stays NaN even where dropped) with scale = 1 / (1 - p), or 0 when p == 1.
#include <c10/util/Exception.h>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/numbers.h"
#include "lowering/random_bits.h"

namespace torchtpu::lowering {
namespace {

// x * mask * scale in the result's dtype (a bool gradient gives a float result), with the
// scale (a 0-d value: a runtime argument in eager mode) applied in f32 for half types (the CPU
// kernel's opmath).
Value apply_mask(FunctionBuilder& b, Value x, Value mask, Value scale, const TensorType& out) {
  ElementType ct = opmath_type(out.dtype);
  Value xc = b.convert(x, ct);
  Value y = b.mul(b.mul(xc, b.convert(mask, ct)), b.broadcast_to(b.convert(scale, ct), xc.shape()));
  return coerce(b, y, out);
}

// native_dropout(input, p, train) -> (output, mask). `p` is a runtime value in eager mode
// (aten/argument_checks.cpp checks 0 <= p <= 1 on the host), so one program serves every p:
// p == 0 keeps everything (u < 1 always holds) and p == 1 drops everything with scale 0.
std::vector<Value> lower_native_dropout(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  bool train = ctx.is_none(2) || ctx.bool_arg(2);
  const TensorType& out = ctx.out_type(0);
  const TensorType& mask_t = ctx.out_type(1);
  if (ctx.arg(1).kind == LArg::Kind::kConst) {
    double p = ctx.double_arg(1);
    TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  }
  if (!train || x.type.numel() == 0) {
    return {coerce(b, x, out),
            coerce(b, b.constant(1, TensorType(ElementType::kPred, {})), mask_t)};
  }
  // Keep where u < 1 - p with u uniform on [0, 1) at f32 resolution: exactly bernoulli(1 - p)
  // as the CPU kernel draws it. The scale 1 / (1 - p) is computed in the input's precision
  // (f64 for f64, else f32), 0 when p == 1 (x * 0 keeps CPU's NaN * 0 = NaN).
  ElementType st = out.dtype == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  Value p = number(ctx, 1, st);
  Value one = b.constant(1, TensorType(st, {}));
  Value keep_prob = b.sub(one, p);
  Value all_dropped = b.compare(p, one, shlo::CompareDirection::kGE);
  Value scale = b.select(all_dropped, b.constant(0, TensorType(st, {})), b.div(one, keep_prob));
  Value u = uniform01_from_state(b, ctx.rng_state(), x.shape(), ElementType::kF32, 24);
  Value threshold = b.broadcast_to(b.convert(keep_prob, ElementType::kF32), x.shape());
  Value keep = b.compare(u, threshold, shlo::CompareDirection::kLT);
  return {apply_mask(b, x, keep, scale, out), coerce(b, keep, mask_t)};
}

// native_dropout_backward(grad_output, mask, scale)
std::vector<Value> lower_native_dropout_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType st =
      ctx.out_type().dtype == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  return {apply_mask(b, ctx.tensor(0), ctx.tensor(1), number(ctx, 2, st), ctx.out_type())};
}

TORCHTPU_LOWERING("aten::native_dropout", lower_native_dropout);
TORCHTPU_LOWERING("aten::native_dropout_backward", lower_native_dropout_backward);

}  // namespace
}  // namespace torchtpu::lowering
