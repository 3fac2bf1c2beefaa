// Randomized leaky ReLU, as ATen's CPU kernels (Activation.cpp / _rrelu_with_noise_train):
// - training: for x <= 0 draw r ~ U[lower, upper) from the op's generator, output x * r and
//   noise = r; elsewhere (x > 0 or NaN) output x and noise = 1;
// - eval: leaky_relu with slope (lower + upper) / 2 (computed in double, then rounded to the
//   dtype), noise untouched.
// The lowering is the functional form (rrelu_with_noise_functional -> (out, noise_out)); the
// tpu kernel of rrelu_with_noise, which writes `noise` and returns a fresh tensor, runs it and
// copies noise_out into noise.
#include <ATen/ops/rrelu_with_noise.h>
#include <c10/util/Exception.h>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/random_bits.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// (lower + upper) / 2 in f64, rounded to the dtype, then to the compute type.
Value eval_slope(LoweringContext& ctx, ElementType dtype) {
  FunctionBuilder& b = ctx.b;
  Value lo = ctx.operand(ctx.index_of("lower"), ElementType::kF64);
  Value hi = ctx.operand(ctx.index_of("upper"), ElementType::kF64);
  Value mid = b.mul(b.add(lo, hi), b.constant(0.5, lo.type));
  return b.convert(b.convert(mid, dtype), opmath_type(dtype));
}

// rrelu_with_noise_functional(self, noise, lower, upper, training, generator)
std::vector<Value> lower_rrelu_functional(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value noise = ctx.tensor(1);
  bool training = ctx.bool_arg(ctx.index_of("training"));
  const TensorType& out_t = ctx.out_type(0);
  ElementType dt = out_t.dtype;
  ElementType ct = opmath_type(dt);
  Value xc = b.convert(x, ct);
  if (!training || x.type.numel() == 0) {
    Value slope = b.broadcast_to(eval_slope(ctx, dt), x.shape());
    Value positive = b.compare(xc, b.constant(0, xc.type), CompareDirection::kGT);
    return {coerce(b, b.select(positive, xc, b.mul(xc, slope)), out_t),
            coerce(b, noise, ctx.out_type(1))};
  }
  const LArg& g = ctx.arg(ctx.index_of("generator"));
  TORCH_CHECK(g.kind == LArg::Kind::kGenerator,
              "torchtpu lowering: rrelu_with_noise: the generator state did not arrive as a "
              "runtime value");
  // r = lower + (upper - lower) * u, u uniform [0, 1) in double (uniform_real_distribution).
  Value u = uniform01_from_state(b, g.value, x.shape(), ElementType::kF64, 53);
  Value lo = b.broadcast_to(ctx.operand(ctx.index_of("lower"), ElementType::kF64), x.shape());
  Value hi = b.broadcast_to(ctx.operand(ctx.index_of("upper"), ElementType::kF64), x.shape());
  Value r = b.convert(b.convert(b.add(b.mul(u, b.sub(hi, lo)), lo), dt), ct);
  Value nonpos = b.compare(xc, b.constant(0, xc.type), CompareDirection::kLE);
  Value n = b.select(nonpos, r, b.constant(1, r.type));
  Value y = b.select(nonpos, b.mul(xc, r), xc);
  return {coerce(b, y, out_t), coerce(b, n, ctx.out_type(1))};
}

// rrelu_with_noise_backward(grad_output, self, noise, lower, upper, training, self_is_result)
std::vector<Value> lower_rrelu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out_t = ctx.out_type();
  ElementType dt = out_t.dtype;
  ElementType ct = opmath_type(dt);
  Value g = b.convert(ctx.tensor(0), ct);
  Value x = b.convert(ctx.tensor(1), ct);
  bool training = ctx.bool_arg(5);
  // The CPU kernel branches on the values of lower/upper (upper - lower > 1e-6): both are
  // known only at run time here, so select between the two gradients.
  Value lo = ctx.operand(3, ElementType::kF64), hi = ctx.operand(4, ElementType::kF64);
  Value slope = b.broadcast_to(eval_slope(ctx, dt), x.shape());
  Value positive = b.compare(x, b.constant(0, x.type), CompareDirection::kGT);
  Value leaky = b.select(positive, g, b.mul(g, slope));
  if (!training) return {coerce(b, leaky, out_t)};
  Value noisy = b.mul(g, b.convert(ctx.tensor(2), ct));
  Value wide = b.compare(b.sub(hi, lo), b.constant(1e-6, lo.type), CompareDirection::kGT);
  return {coerce(b, b.select(b.broadcast_to(wide, x.shape()), noisy, leaky), out_t)};
}

TORCHTPU_LOWERING("aten::rrelu_with_noise_functional", lower_rrelu_functional);
TORCHTPU_LOWERING("aten::rrelu_with_noise_backward", lower_rrelu_backward);

}  // namespace
}  // namespace torchtpu::lowering
