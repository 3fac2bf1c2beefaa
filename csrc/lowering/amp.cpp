// GradScaler's two device ops (torch.amp.GradScaler("tpu")), following PyTorch's CPU kernels
// (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp). The in-place forms the scaler calls
// (`_amp_foreach_non_finite_check_and_unscale_`, `_amp_update_scale_`) lower these functional
// forms; the eager kernel writes the results back, so unscaling every gradient is one program.
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

Value any_non_finite(FunctionBuilder& b, Value x) {
  Value finite = shlo::is_finite(b, x);
  Value bad = b.unary("stablehlo.not", finite);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < bad.rank(); ++d) dims.push_back(d);
  return b.reduce_simple(bad, b.constant(0, TensorType(ElementType::kPred, {})), dims,
                         "stablehlo.or");
}

// (Tensor[] self, Tensor found_inf, Tensor inv_scale) -> (Tensor[] self_out, Tensor found_inf_out)
std::vector<Value> lower_non_finite_check_and_unscale(LoweringContext& ctx) {
  auto& b = ctx.b;
  std::vector<Value> grads = ctx.tensor_list(0);
  Value found_inf = ctx.tensor(1);
  const TensorType& found_type = ctx.out_type(grads.size());
  TORCH_CHECK(found_type.numel() == 1,
              "_amp_foreach_non_finite_check_and_unscale_: found_inf "
              "must be a 1-element tensor");
  // The kernel multiplies in the gradient's opmath type (float32 for half types) by the float
  // inv_scale, and leaves values untouched when inv_scale == 1.
  Value inv = b.reshape(b.convert(ctx.tensor(2), ElementType::kF32), {});
  Value one = b.constant(1.0, TensorType(ElementType::kF32, {}));
  Value inv_is_one = b.compare(inv, one, CompareDirection::kEQ);
  std::vector<Value> out;
  Value any_bad = b.constant(0, TensorType(ElementType::kPred, {}));
  for (size_t i = 0; i < grads.size(); ++i) {
    Value g = grads[i];
    TORCH_CHECK(shlo::is_float(g.dtype()),
                "_amp_foreach_non_finite_check_and_unscale_: gradients must be floating point");
    ElementType acc = g.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
    Value v = b.convert(g, acc);
    Value s = b.broadcast_to(b.convert(inv, acc), v.shape());
    Value scaled = b.mul(v, s);
    Value r = b.select(b.broadcast_to(inv_is_one, v.shape()), v, scaled);
    out.push_back(b.convert(r, g.dtype()));
    any_bad = b.binary("stablehlo.or", any_bad, any_non_finite(b, g));
  }
  Value f = b.convert(found_inf, found_type.dtype);
  Value flag = b.broadcast_to(any_bad, f.shape());
  out.push_back(b.select(flag, full_like_type(b, 1.0, f.type), f));
  return out;
}

// (Tensor self, Tensor growth_tracker, Tensor found_inf, float growth, float backoff,
//  int growth_interval) -> (Tensor, Tensor growth_tracker_out)
std::vector<Value> lower_update_scale(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value scale = ctx.tensor(0);
  Value tracker = ctx.tensor(1);
  Value found = ctx.tensor(2);
  double growth = ctx.double_arg(3);
  double backoff = ctx.double_arg(4);
  int64_t interval = ctx.int_arg(5);
  TORCH_CHECK(scale.dtype() == ElementType::kF32,
              "_amp_update_scale_: current_scale must be a "
              "float tensor");
  TORCH_CHECK(tracker.dtype() == ElementType::kS32,
              "_amp_update_scale_: growth_tracker must be "
              "an int tensor");
  Value is_inf = b.compare(found, full_like_type(b, 0, found.type), CompareDirection::kNE);
  // CPU multiplies the float scale by the double factor; float32 math gives the same result for
  // factors exact in float32 (the defaults 2.0 and 0.5) and needs no f64 support on TPUs.
  Value backed = b.mul(scale, full_like_type(b, backoff, scale.type));
  Value grown = b.mul(scale, full_like_type(b, growth, scale.type));
  Value grown_ok = shlo::is_finite(b, grown);
  Value successful = b.add(tracker, full_like_type(b, 1, tracker.type));
  Value at_interval =
      b.compare(successful, full_like_type(b, static_cast<double>(interval), tracker.type),
                CompareDirection::kEQ);
  Value zero_t = full_like_type(b, 0, tracker.type);
  Value kept_scale = b.select(grown_ok, grown, scale);
  Value new_scale = b.select(is_inf, backed, b.select(at_interval, kept_scale, scale));
  Value new_tracker = b.select(is_inf, zero_t, b.select(at_interval, zero_t, successful));
  return {new_scale, new_tracker};
}

TORCHTPU_LOWERING("aten::_amp_foreach_non_finite_check_and_unscale",
                  lower_non_finite_check_and_unscale);
TORCHTPU_LOWERING("aten::_amp_update_scale", lower_update_scale);

}  // namespace
}  // namespace torchtpu::lowering
