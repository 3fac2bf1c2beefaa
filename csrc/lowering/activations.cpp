// Activation functions and the backward ops autograd calls for them. Formulas and operation
// order follow ATen's CPU kernels (Activation.cpp) so results match within rounding; f16/bf16
// math runs in f32 and rounds once, like those kernels.
#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <string>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

using shlo::CompareDirection;

// Argument i broadcast to the result shape, in the result's opmath dtype.
Value arg(LoweringContext& ctx, size_t i) {
  const TensorType& out = ctx.out_type();
  return coerce(ctx.b, ctx.tensor(i), out.with_dtype(opmath_type(out.dtype)));
}

Value named(LoweringContext& ctx, const char* name) { return arg(ctx, ctx.index_of(name)); }

std::string string_arg(LoweringContext& ctx, const char* name) {
  size_t i = ctx.index_of(name);
  return ctx.is_none(i) ? "none" : ctx.arg(i).ivalue.toStringRef();
}

// NaN-propagating clamp (XLA's maximum/minimum drop NaN on CPU; PyTorch's clamp keeps it).
Value clamp_nan(FunctionBuilder& b, Value x, Value lo, Value hi) {
  Value r = b.min(b.max(x, lo), hi);
  if (!shlo::is_float(x.dtype())) return r;
  return b.select(is_nan(b, x), x, r);
}

std::vector<Value> lower_relu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = coerce(b, ctx.tensor(0), ctx.out_type());
  Value zero = cst(b, 0, x);
  // select keeps NaN, as clamp_min(x, 0) does.
  return {b.select(cmp(b, x, zero, CompareDirection::kLT), zero, x)};
}

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kGeluBeta = 0.79788456080286535588;    // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

// tanh(sqrt(2/pi) * (x + 0.044715 x^3)) of the tanh approximation.
Value gelu_tanh_inner(FunctionBuilder& b, Value x) {
  Value cube = b.mul(b.mul(x, x), x);
  Value inner = b.mul(cst(b, kGeluBeta, x), b.add(x, b.mul(cst(b, kGeluKappa, x), cube)));
  return b.unary("stablehlo.tanh", inner);
}

std::vector<Value> lower_gelu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0);
  std::string approx = string_arg(ctx, "approximate");
  Value half = cst(b, 0.5, x), one = cst(b, 1, x);
  Value inner;
  if (approx == "tanh") {
    inner = gelu_tanh_inner(b, x);
  } else {
    TORCH_CHECK(approx == "none", "torchtpu lowering: gelu: unknown approximate '", approx, "'");
    // 1 + erf(x / sqrt2) as erfc(-x / sqrt2): no cancellation for negative x.
    Value cdf2 = b.unary("chlo.erfc", b.mul(x, cst(b, -kSqrt1_2, x)));
    return {finish(ctx, b.mul(b.mul(x, half), cdf2))};
  }
  return {finish(ctx, b.mul(b.mul(x, half), b.add(one, inner)))};
}

std::vector<Value> lower_gelu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  std::string approx = string_arg(ctx, "approximate");
  Value half = cst(b, 0.5, x), one = cst(b, 1, x);
  Value dx;
  if (approx == "tanh") {
    Value t = gelu_tanh_inner(b, x);
    Value left = b.mul(half, x);
    Value left_derivative = b.mul(half, b.add(one, t));
    Value tanh_derivative = b.sub(one, b.mul(t, t));
    Value inner_derivative =
        b.mul(cst(b, kGeluBeta, x), b.add(one, b.mul(cst(b, 3 * kGeluKappa, x), b.mul(x, x))));
    dx = b.add(left_derivative, b.mul(b.mul(left, tanh_derivative), inner_derivative));
  } else {
    TORCH_CHECK(approx == "none", "torchtpu lowering: gelu_backward: unknown approximate '", approx,
                "'");
    Value cdf = b.mul(half, b.unary("chlo.erfc", b.mul(x, cst(b, -kSqrt1_2, x))));
    Value pdf = b.mul(b.unary("stablehlo.exponential", b.mul(cst(b, -0.5, x), b.mul(x, x))),
                      cst(b, kInvSqrt2Pi, x));
    dx = b.add(cdf, b.mul(x, pdf));
  }
  return {finish(ctx, b.mul(grad, dx))};
}

std::vector<Value> lower_silu(LoweringContext& ctx) {
  Value x = arg(ctx, 0);
  return {finish(ctx, ctx.b.mul(x, ctx.b.unary("stablehlo.logistic", x)))};
}

std::vector<Value> lower_silu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  Value one = cst(b, 1, x);
  Value s = b.unary("stablehlo.logistic", x);
  Value d = b.mul(s, b.add(one, b.mul(x, b.sub(one, s))));
  return {finish(ctx, b.mul(grad, d))};
}

std::vector<Value> lower_mish(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0);
  Value softplus = b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", x));
  return {finish(ctx, b.mul(x, b.unary("stablehlo.tanh", softplus)))};
}

// dy * (tanh(softplus(x)) + x * sigmoid(x) * (1 - tanh(softplus(x))^2))
std::vector<Value> lower_mish_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  Value one = cst(b, 1, x);
  Value s = b.unary("stablehlo.logistic", x);
  Value t = b.unary("stablehlo.tanh",
                    b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", x)));
  Value d = b.add(t, b.mul(b.mul(x, s), b.sub(one, b.mul(t, t))));
  return {finish(ctx, b.mul(grad, d))};
}

// (min(x, 0) - log1p(exp(-|x|)), buffer = exp(-|x|)), the CPU kernel's formulation; its
// backward reads the buffer, so the buffer must hold the same values.
std::vector<Value> lower_log_sigmoid_forward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0);
  Value zero = cst(b, 0, x);
  Value z = b.unary("stablehlo.exponential", b.neg(b.unary("stablehlo.abs", x)));
  Value lo = b.select(cmp(b, x, zero, CompareDirection::kLT), x, zero);  // keeps NaN
  Value out = b.sub(lo, b.unary("stablehlo.log_plus_one", z));
  return {coerce(b, out, ctx.out_type(0)), coerce(b, z, ctx.out_type(1))};
}

// grad * (max_deriv - sign * z / (1 + z)) with z the forward's buffer.
std::vector<Value> lower_log_sigmoid_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1), z = arg(ctx, 2);
  Value one = cst(b, 1, x);
  Value negative = cmp(b, x, cst(b, 0, x), CompareDirection::kLT);
  Value max_deriv = b.select(negative, one, cst(b, 0, x));
  Value sign = b.select(negative, one, cst(b, -1, x));
  Value d = b.sub(max_deriv, b.mul(sign, b.div(z, b.add(one, z))));
  return {finish(ctx, b.mul(grad, d))};
}

// The derivative is conjugated for complex values (PyTorch's convention for holomorphic
// functions: grad * conj(f'(x))); a no-op for real ones.
Value conj_if_complex(FunctionBuilder& b, Value v) {
  return shlo::is_complex(v.dtype()) ? conj(b, v) : v;
}

std::vector<Value> lower_sigmoid_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), y = arg(ctx, 1);
  return {finish(ctx, b.mul(grad, conj_if_complex(b, b.mul(b.sub(cst(b, 1, y), y), y))))};
}

std::vector<Value> lower_tanh_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), y = arg(ctx, 1);
  return {finish(ctx, b.mul(grad, conj_if_complex(b, b.sub(cst(b, 1, y), b.mul(y, y)))))};
}

// x * beta > threshold ? x : log1p(exp(x * beta)) / beta
std::vector<Value> lower_softplus(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0), beta = named(ctx, "beta"), threshold = named(ctx, "threshold");
  Value xb = b.mul(x, beta);
  Value soft = b.div(b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", xb)), beta);
  return {finish(ctx, b.select(cmp(b, xb, threshold, CompareDirection::kGT), x, soft))};
}

std::vector<Value> lower_softplus_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  Value beta = named(ctx, "beta"), threshold = named(ctx, "threshold");
  Value xb = b.mul(x, beta);
  Value z = b.unary("stablehlo.exponential", xb);
  Value soft = b.div(b.mul(grad, z), b.add(z, cst(b, 1, z)));
  return {finish(ctx, b.select(cmp(b, xb, threshold, CompareDirection::kGT), grad, soft))};
}

std::vector<Value> lower_hardtanh(LoweringContext& ctx) {
  Value x = arg(ctx, 0);
  return {finish(ctx, clamp_nan(ctx.b, x, named(ctx, "min_val"), named(ctx, "max_val")))};
}

std::vector<Value> lower_hardtanh_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  Value lo = named(ctx, "min_val"), hi = named(ctx, "max_val");
  Value outside =
      lor(b, cmp(b, x, lo, CompareDirection::kLE), cmp(b, x, hi, CompareDirection::kGE));
  return {finish(ctx, b.select(outside, cst(b, 0, grad), grad))};
}

std::vector<Value> lower_leaky_relu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0), slope = named(ctx, "negative_slope");
  Value positive = cmp(b, x, cst(b, 0, x), CompareDirection::kGT);
  return {finish(ctx, b.select(positive, x, b.mul(x, slope)))};
}

std::vector<Value> lower_leaky_relu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1), slope = named(ctx, "negative_slope");
  Value positive = cmp(b, x, cst(b, 0, x), CompareDirection::kGT);
  return {finish(ctx, b.select(positive, grad, b.mul(grad, slope)))};
}

// x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale
std::vector<Value> lower_elu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0);
  Value alpha = named(ctx, "alpha"), scale = named(ctx, "scale"),
        input_scale = named(ctx, "input_scale");
  Value negcoef = b.mul(alpha, scale);
  Value neg = b.mul(b.unary("stablehlo.exponential_minus_one", b.mul(x, input_scale)), negcoef);
  Value nonpositive = cmp(b, x, cst(b, 0, x), CompareDirection::kLE);
  return {finish(ctx, b.select(nonpositive, neg, b.mul(x, scale)))};
}

std::vector<Value> lower_elu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0);
  Value alpha = named(ctx, "alpha"), scale = named(ctx, "scale"),
        input_scale = named(ctx, "input_scale");
  bool is_result = ctx.bool_arg(ctx.index_of("is_result"));
  Value x = named(ctx, "self_or_result");
  Value negcoef = b.mul(alpha, scale);
  Value neg;
  if (is_result) {
    // x is the forward output: d/dx = input_scale * (out + alpha * scale).
    neg = b.mul(b.mul(grad, input_scale), b.add(x, negcoef));
  } else {
    Value e = b.unary("stablehlo.exponential", b.mul(x, input_scale));
    neg = b.mul(b.mul(b.mul(grad, input_scale), negcoef), e);
  }
  Value nonpositive = cmp(b, x, cst(b, 0, x), CompareDirection::kLE);
  return {finish(ctx, b.select(nonpositive, neg, b.mul(grad, scale)))};
}

// x <= threshold ? value : x
std::vector<Value> lower_threshold(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0), threshold = named(ctx, "threshold"), value = named(ctx, "value");
  return {finish(ctx, b.select(cmp(b, x, threshold, CompareDirection::kLE), value, x))};
}

std::vector<Value> lower_threshold_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1), threshold = named(ctx, "threshold");
  Value below = cmp(b, x, threshold, CompareDirection::kLE);
  return {finish(ctx, b.select(below, cst(b, 0, grad), grad))};
}

// min(max(x + 3, 0), 6) / 6
Value relu6_of_x_plus_3(FunctionBuilder& b, Value x) {
  return clamp_nan(b, b.add(x, cst(b, 3, x)), cst(b, 0, x), cst(b, 6, x));
}

std::vector<Value> lower_hardsigmoid(LoweringContext& ctx) {
  Value x = arg(ctx, 0);
  return {finish(ctx, ctx.b.div(relu6_of_x_plus_3(ctx.b, x), cst(ctx.b, 6, x)))};
}

std::vector<Value> lower_hardswish(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = arg(ctx, 0);
  return {finish(ctx, b.div(b.mul(x, relu6_of_x_plus_3(b, x)), cst(b, 6, x)))};
}

std::vector<Value> lower_hardsigmoid_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  Value inside = b.binary("stablehlo.and", cmp(b, x, cst(b, -3, x), CompareDirection::kGT),
                          cmp(b, x, cst(b, 3, x), CompareDirection::kLT));
  return {finish(ctx, b.select(inside, b.mul(grad, cst(b, 1.0 / 6.0, x)), cst(b, 0, x)))};
}

std::vector<Value> lower_hardswish_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value grad = arg(ctx, 0), x = arg(ctx, 1);
  Value lo = cst(b, -3, x), hi = cst(b, 3, x);
  Value mid = b.mul(grad, b.add(b.div(x, hi), cst(b, 0.5, x)));
  Value r = b.select(cmp(b, x, hi, CompareDirection::kLT), mid, grad);
  return {finish(ctx, b.select(cmp(b, x, lo, CompareDirection::kLE), cst(b, 0, x), r))};
}

TORCHTPU_LOWERING("aten::relu", lower_relu, kElementwise);
TORCHTPU_LOWERING("aten::log_sigmoid_forward", lower_log_sigmoid_forward, kElementwise);
TORCHTPU_LOWERING("aten::log_sigmoid_backward", lower_log_sigmoid_backward, kElementwise);
TORCHTPU_LOWERING("aten::gelu", lower_gelu, kElementwise);
TORCHTPU_LOWERING("aten::gelu_backward", lower_gelu_backward, kElementwise);
TORCHTPU_LOWERING("aten::silu", lower_silu, kElementwise);
TORCHTPU_LOWERING("aten::silu_backward", lower_silu_backward, kElementwise);
TORCHTPU_LOWERING("aten::mish", lower_mish, kElementwise);
TORCHTPU_LOWERING("aten::mish_backward", lower_mish_backward, kElementwise);
TORCHTPU_LOWERING("aten::sigmoid_backward", lower_sigmoid_backward, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::tanh_backward", lower_tanh_backward, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::softplus", lower_softplus, kElementwise);
TORCHTPU_LOWERING("aten::softplus_backward", lower_softplus_backward, kElementwise);
TORCHTPU_LOWERING("aten::hardtanh", lower_hardtanh, kElementwise);
TORCHTPU_LOWERING("aten::hardtanh_backward", lower_hardtanh_backward, kElementwise);
TORCHTPU_LOWERING("aten::leaky_relu", lower_leaky_relu, kElementwise);
TORCHTPU_LOWERING("aten::leaky_relu_backward", lower_leaky_relu_backward, kElementwise);
TORCHTPU_LOWERING("aten::elu", lower_elu, kElementwise);
TORCHTPU_LOWERING("aten::elu_backward", lower_elu_backward, kElementwise);
TORCHTPU_LOWERING("aten::threshold", lower_threshold, kElementwise);
TORCHTPU_LOWERING("aten::threshold_backward", lower_threshold_backward, kElementwise);
TORCHTPU_LOWERING("aten::hardsigmoid", lower_hardsigmoid, kElementwise);
TORCHTPU_LOWERING("aten::hardsigmoid_backward", lower_hardsigmoid_backward, kElementwise);
TORCHTPU_LOWERING("aten::hardswish", lower_hardswish, kElementwise);
TORCHTPU_LOWERING("aten::hardswish_backward", lower_hardswish_backward, kElementwise);

}  // namespace
}  // namespace torchtpu::lowering
