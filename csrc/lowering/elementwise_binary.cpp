// Binary arithmetic with broadcasting and PyTorch's type promotion. Scalars (alpha, Python
// numbers) arrive as 0-d runtime arguments, so a changing value never recompiles.
//
// PyTorch's CPU kernels evaluate f16/bf16 in f32 and round once at the end ("opmath"); the
// lowerings do the same so results match CPU bit for bit where the math is exact.
#include <ATen/core/function_schema.h>
#include <c10/util/Exception.h>

#include <functional>
#include <limits>
#include <string>

#include "lowering/checks.h"
#include "lowering/complex_pow.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

using shlo::CompareDirection;

// opmath_type, except that bool arithmetic runs in i8 so add/mul/max/min act as or/and once
// converted back (!= 0).
ElementType binary_math_type(ElementType t) {
  return t == ElementType::kPred ? ElementType::kS8 : opmath_type(t);
}

Value ne0(FunctionBuilder& b, Value x) { return cmp(b, x, cst(b, 0, x), CompareDirection::kNE); }
Value eq0(FunctionBuilder& b, Value x) { return cmp(b, x, cst(b, 0, x), CompareDirection::kEQ); }

// The dtype the op computes in: the result dtype, widened per opmath.
ElementType compute_dtype(LoweringContext& ctx) { return binary_math_type(ctx.out_type().dtype); }

// Integer division rounding toward -inf (stablehlo.divide truncates).
Value floor_div_int(FunctionBuilder& b, Value x, Value y) {
  Value q = b.div(x, y);
  if (shlo::is_unsigned_int(x.dtype())) return q;
  Value r = b.binary("stablehlo.remainder", x, y);
  Value adjust = land(b, ne0(b, r), lxor(b, lt0(b, r), lt0(b, y)));
  return b.select(adjust, b.sub(q, cst(b, 1, q)), q);
}

// at::native div_floor_floating: floor of the exact quotient, rounding the fmod-corrected
// quotient to the nearest integer so that e.g. 0.3 // 0.1 gives 2 like Python.
Value floor_div_float(FunctionBuilder& b, Value x, Value y) {
  Value zero = cst(b, 0, x), one = cst(b, 1, x);
  Value mod = b.binary("stablehlo.remainder", x, y);
  Value div = b.div(b.sub(x, mod), y);
  Value adjust = land(b, ne0(b, mod), lxor(b, lt0(b, y), lt0(b, mod)));
  div = b.select(adjust, b.sub(div, one), div);
  Value fl = b.unary("stablehlo.floor", div);
  Value round_up = cmp(b, b.sub(div, fl), cst(b, 0.5, x), CompareDirection::kGT);
  fl = b.select(round_up, b.add(fl, one), fl);
  Value quot = b.div(x, y);
  Value signed_zero = b.select(signbit(b, quot), cst(b, -0.0, x), zero);
  Value r = b.select(ne0(b, div), fl, signed_zero);
  return b.select(eq0(b, y), quot, r);
}

Value floor_div(FunctionBuilder& b, Value x, Value y) {
  return is_fp(x.dtype()) ? floor_div_float(b, x, y) : floor_div_int(b, x, y);
}

// Python modulo: the result takes the sign of the divisor.
Value python_remainder(FunctionBuilder& b, Value x, Value y) {
  Value mod = b.binary("stablehlo.remainder", x, y);
  if (shlo::is_unsigned_int(x.dtype())) return mod;
  Value adjust = land(b, ne0(b, mod), lxor(b, lt0(b, y), lt0(b, mod)));
  return b.select(adjust, b.add(mod, y), mod);
}

// Integer power; a negative exponent gives 0 unless |base| == 1, like PyTorch's powi.
Value pow_int(FunctionBuilder& b, Value x, Value y) {
  if (shlo::is_unsigned_int(x.dtype())) return b.binary("stablehlo.power", x, y);
  Value zero = cst(b, 0, x), one = cst(b, 1, x), minus_one = cst(b, -1, x);
  Value negative = lt0(b, y);
  // XLA's integer power is only specified for non-negative exponents.
  Value r = b.binary("stablehlo.power", x, b.select(negative, zero, y));
  Value odd = ne0(b, b.binary("stablehlo.and", y, one));
  Value at_minus_one = b.select(odd, minus_one, one);
  Value neg_result =
      b.select(cmp(b, x, one, CompareDirection::kEQ), one,
               b.select(cmp(b, x, minus_one, CompareDirection::kEQ), at_minus_one, zero));
  return b.select(negative, neg_result, r);
}

// ---- lowerings ----

// add/sub/rsub with alpha: lhs op alpha * rhs.
LoweringFn with_alpha(const char* stablehlo_op, bool reversed) {
  return [stablehlo_op, reversed](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = compute_dtype(ctx);
    Value a = operand(ctx, reversed ? 1 : 0, ct);
    Value b = operand(ctx, reversed ? 0 : 1, ct);
    size_t alpha = ctx.index_of("alpha");
    // The default alpha (1) multiplies nothing (XLA drops the product too): leaving it out keeps
    // a plain add's module free of a product, which XLA:CPU's level-0 quick compile requires
    // (runtime/compile_effort.cpp). Complex values keep it: (1+0i) * (inf+0i) is not inf+0i.
    const bool unit_alpha = ctx.arg(alpha).is_default && !shlo::is_complex(ct);
    if (!ctx.is_none(alpha) && !unit_alpha) b = ctx.b.mul(b, operand(ctx, alpha, ct));
    return {finish(ctx, ctx.b.binary(stablehlo_op, a, b))};
  };
}

using BinaryFn = std::function<Value(FunctionBuilder&, Value, Value)>;

// out = f(arg lhs, arg rhs) computed in the result's opmath dtype.
LoweringFn binary_fn(BinaryFn f, size_t lhs = 0, size_t rhs = 1) {
  return [f, lhs, rhs](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = compute_dtype(ctx);
    return {finish(ctx, f(ctx.b, operand(ctx, lhs, ct), operand(ctx, rhs, ct)))};
  };
}

LoweringFn binary_op(const char* stablehlo_op) {
  std::string name = stablehlo_op;
  return binary_fn([name](FunctionBuilder& b, Value x, Value y) { return b.binary(name, x, y); });
}

std::vector<Value> lower_div_mode(LoweringContext& ctx) {
  size_t mode_i = ctx.index_of("rounding_mode");
  std::string mode = ctx.is_none(mode_i) ? "" : ctx.arg(mode_i).ivalue.toStringRef();
  ElementType ct = compute_dtype(ctx);
  Value x = operand(ctx, 0, ct), y = operand(ctx, 1, ct);
  if (mode.empty()) return {finish(ctx, ctx.b.div(x, y))};
  // CPU has no rounding division of complex values: not implemented here either, so the CPU
  // fallback raises CPU's own error.
  TORCH_CHECK_NOT_IMPLEMENTED(!shlo::is_complex(ct), ctx.schema().name(), " with rounding_mode='",
                              mode, "' is not implemented for complex values");
  if (mode == "trunc") {
    // The CPU kernel rounds an f16/bf16 quotient to its dtype before truncating it.
    Value q = ctx.b.convert(ctx.b.div(x, y), ctx.out_type().dtype);
    return {finish(ctx, is_fp(q.dtype()) ? trunc_float(ctx.b, q) : q)};
  }
  TORCH_CHECK(mode == "floor", "torchtpu lowering: ", ctx.schema().name(),
              ": rounding_mode must be None, 'trunc' or 'floor', got '", mode, "'");
  return {finish(ctx, floor_div(ctx.b, x, y))};
}

// Float power is XLA's; integers need PyTorch's negative-exponent rule.
Value pow_any(FunctionBuilder& b, Value x, Value y) {
  if (shlo::is_complex(x.dtype())) return complex_pow(b, x, y);
  return is_fp(x.dtype()) ? b.binary("stablehlo.power", x, y) : pow_int(b, x, y);
}

// pow(complex tensor, Scalar) as CPU's pow_tensor_scalar: exponents 0 and 1 fill and copy,
// 2, 3 and -2 multiply, 0.5, -0.5 and -1 take sqrt, rsqrt and reciprocal; their values at
// infinities and zeros differ from exp(y log x) (CPU's (1 + inf j)^2 is -inf + inf j). The
// exponent is a runtime value, so the special case is selected at run time.
Value pow_complex_scalar(FunctionBuilder& b, Value x, Value y) {
  Value r = complex_pow(b, x, y);
  auto when = [&](double e, Value v) {
    r = b.select(cmp(b, y, cst(b, e, y), CompareDirection::kEQ), v, r);
  };
  Value one = cst(b, 1, x), x2 = b.mul(x, x);
  when(2, x2);
  when(3, b.mul(x2, x));
  when(-2, b.div(one, x2));
  when(0.5, signed_zero_cut(unary_fn("stablehlo.sqrt"), Cut::kRealAxis)(b, x));
  when(-0.5, signed_zero_cut(unary_fn("stablehlo.rsqrt"), Cut::kRealAxis)(b, x));
  when(-1, b.div(one, x));
  when(1, x);
  when(0, one);
  return r;
}

Value pow_tensor_scalar(FunctionBuilder& b, Value x, Value y) {
  return shlo::is_complex(x.dtype()) ? pow_complex_scalar(b, x, y) : pow_any(b, x, y);
}

Value fmax_fn(FunctionBuilder& b, Value x, Value y) {
  Value r = b.max(x, y);
  if (!is_fp(x.dtype())) return r;
  r = b.select(is_nan(b, x), y, r);
  return b.select(is_nan(b, y), x, r);
}

Value fmin_fn(FunctionBuilder& b, Value x, Value y) {
  Value r = b.min(x, y);
  if (!is_fp(x.dtype())) return r;
  r = b.select(is_nan(b, x), y, r);
  return b.select(is_nan(b, y), x, r);
}

// Scaled like std::hypot so large operands do not overflow; inf wins over NaN.
Value hypot_fn(FunctionBuilder& b, Value x, Value y) {
  Value ax = b.unary("stablehlo.abs", x), ay = b.unary("stablehlo.abs", y);
  Value hi = max_nan(b, ax, ay), lo = min_nan(b, ax, ay);
  Value ratio = b.div(lo, hi);
  Value r = b.mul(hi, b.unary("stablehlo.sqrt", b.add(cst(b, 1, x), b.mul(ratio, ratio))));
  r = b.select(eq0(b, hi), cst(b, 0, x), r);
  return b.select(lor(b, is_inf(b, x), is_inf(b, y)),
                  cst(b, std::numeric_limits<double>::infinity(), x), r);
}

// at::native xlogy: 0 where x == 0 (even for y == 0), NaN wherever y is NaN.
Value xlogy_fn(FunctionBuilder& b, Value x, Value y) {
  Value r = b.mul(x, b.unary("stablehlo.log", y));
  r = b.select(eq0(b, x), cst(b, 0, x), r);
  return b.select(is_nan(b, y), y, r);
}

// at::native lerp: two formulas so both ends are exact.
std::vector<Value> lower_lerp(LoweringContext& ctx) {
  ElementType ct = compute_dtype(ctx);
  FunctionBuilder& b = ctx.b;
  Value start = operand(ctx, 0, ct), end = operand(ctx, 1, ct), w = operand(ctx, 2, ct);
  Value diff = b.sub(end, start);
  // |w| < 0.5 picks the formula; a complex weight compares its (real) magnitude.
  Value aw = shlo::is_complex(w.dtype()) ? complex_abs(b, w) : b.unary("stablehlo.abs", w);
  Value small = cmp(b, aw, cst(b, 0.5, aw), CompareDirection::kLT);
  Value from_start = b.add(start, b.mul(w, diff));
  Value from_end = b.sub(end, b.mul(diff, b.sub(cst(b, 1, w), w)));
  return {finish(ctx, b.select(small, from_start, from_end))};
}

// self + value * t1 (*|/) t2, associating like the CPU kernel.
LoweringFn addc(const char* stablehlo_op) {
  return [stablehlo_op](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = compute_dtype(ctx);
    FunctionBuilder& b = ctx.b;
    Value self = operand(ctx, 0, ct), t1 = operand(ctx, 1, ct), t2 = operand(ctx, 2, ct);
    Value value = operand(ctx, ctx.index_of("value"), ct);
    return {finish(ctx, b.add(self, b.binary(stablehlo_op, b.mul(value, t1), t2)))};
  };
}

// Integer division and remainder by zero: CPU raises "ZeroDivisionError" (a RuntimeError), XLA
// returns -1 or the dividend. A divisor the host knows raises at the call (aten/
// argument_checks.cpp); here the program checks the divisor's values on the device.
LoweringFn zero_divisor_checked(LoweringFn fn) {
  return [fn = std::move(fn)](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = compute_dtype(ctx);
    size_t mode = ctx.num_args() > 2 ? ctx.index_of("rounding_mode") : 0;
    bool integer =
        !is_fp(ct) && !shlo::is_complex(ct) && ctx.out_type().dtype != ElementType::kPred;
    if (integer && (mode == 0 || !ctx.is_none(mode))) {
      FunctionBuilder& b = ctx.b;
      Value y = operand(ctx, 1, ct);
      Value flat = b.reshape(y, {y.type.numel()});
      Value all = b.reduce_simple(ne0(b, flat), b.constant(1, TensorType(ElementType::kPred, {})),
                                  {0}, "stablehlo.and");
      check(ctx, all, "ZeroDivisionError", /*index_error=*/false);
    }
    return fn(ctx);
  };
}

// An integer tensor to a negative integer Scalar power: refused by the CPU. The eager kernel
// checks a host Scalar at the call; a compiled graph's constant exponent is checked here.
LoweringFn negative_int_power_checked(LoweringFn fn) {
  return [fn = std::move(fn)](LoweringContext& ctx) -> std::vector<Value> {
    const LArg& e = ctx.arg(1);
    ElementType xt = ctx.tensor(0).dtype();
    if (e.kind == LArg::Kind::kScalar && e.ivalue.isInt() && !is_fp(xt) && !shlo::is_complex(xt) &&
        xt != ElementType::kPred) {
      FunctionBuilder& b = ctx.b;
      Value y = b.convert(ctx.tensor(1), ElementType::kS64);
      check(ctx, cmp(b, y, cst(b, 0, y), CompareDirection::kGE),
            "Integers to negative integer powers are not allowed.", /*index_error=*/false);
    }
    return fn(ctx);
  };
}

TORCHTPU_LOWERING("aten::add.Tensor", with_alpha("stablehlo.add", false), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::add.Scalar", with_alpha("stablehlo.add", false), kComplex | kElementwise);
TORCHTPU_LOWERING(
    "aten::sub.Tensor",
    reject_bool_operands(
        "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
        "invert a mask, use the `~` or `logical_not()` operator instead.",
        with_alpha("stablehlo.subtract", false)),
    kComplex | kElementwise);
TORCHTPU_LOWERING(
    "aten::sub.Scalar",
    reject_bool_operands(
        "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
        "invert a mask, use the `~` or `logical_not()` operator instead.",
        with_alpha("stablehlo.subtract", false)),
    kComplex | kElementwise);
TORCHTPU_LOWERING(
    "aten::rsub.Tensor",
    reject_bool_operands(
        "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
        "invert a mask, use the `~` or `logical_not()` operator instead.",
        with_alpha("stablehlo.subtract", true)),
    kComplex | kElementwise);
TORCHTPU_LOWERING(
    "aten::rsub.Scalar",
    reject_bool_operands(
        "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
        "invert a mask, use the `~` or `logical_not()` operator instead.",
        with_alpha("stablehlo.subtract", true)),
    kComplex | kElementwise);
TORCHTPU_LOWERING("aten::mul.Tensor", binary_op("stablehlo.multiply"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::mul.Scalar", binary_op("stablehlo.multiply"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::div.Tensor", binary_op("stablehlo.divide"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::div.Scalar", binary_op("stablehlo.divide"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::true_divide.Tensor", binary_op("stablehlo.divide"), kElementwise);
TORCHTPU_LOWERING("aten::true_divide.Scalar", binary_op("stablehlo.divide"), kElementwise);
TORCHTPU_LOWERING("aten::div.Tensor_mode",
                  reject_bool_result("div_trunc", zero_divisor_checked(lower_div_mode)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::div.Scalar_mode",
                  reject_bool_result("div_trunc", zero_divisor_checked(lower_div_mode)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::floor_divide", zero_divisor_checked(binary_fn(floor_div)), kElementwise);
TORCHTPU_LOWERING("aten::floor_divide.Scalar", zero_divisor_checked(binary_fn(floor_div)),
                  kElementwise);
TORCHTPU_LOWERING("aten::remainder.Tensor",
                  reject_bool_result("remainder",
                                     zero_divisor_checked(binary_fn(python_remainder))),
                  kElementwise);
TORCHTPU_LOWERING("aten::remainder.Scalar",
                  reject_bool_result("remainder",
                                     zero_divisor_checked(binary_fn(python_remainder))),
                  kElementwise);
TORCHTPU_LOWERING("aten::remainder.Scalar_Tensor",
                  reject_bool_result("remainder",
                                     zero_divisor_checked(binary_fn(python_remainder))),
                  kElementwise);
TORCHTPU_LOWERING("aten::fmod.Tensor",
                  reject_bool_result("fmod",
                                     zero_divisor_checked(binary_op("stablehlo.remainder"))),
                  kElementwise);
TORCHTPU_LOWERING("aten::fmod.Scalar",
                  reject_bool_result("fmod",
                                     zero_divisor_checked(binary_op("stablehlo.remainder"))),
                  kElementwise);
// CPU has no bool pow kernel: promoted bool operands are rejected, not computed.
LoweringFn reject_bool_pow(LoweringFn fn) {
  return [fn = std::move(fn)](LoweringContext& ctx) -> std::vector<Value> {
    TORCH_CHECK(ctx.promoted_type({0, 1}) != c10::kBool, "\"pow\" not implemented for 'Bool'");
    return fn(ctx);
  };
}

TORCHTPU_LOWERING("aten::pow.Tensor_Tensor", reject_bool_pow(binary_fn(pow_any)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::pow.Tensor_Scalar",
                  reject_bool_pow(negative_int_power_checked(binary_fn(pow_tensor_scalar))),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::pow.Scalar", reject_bool_pow(binary_fn(pow_any)), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::atan2", binary_op("stablehlo.atan2"), kElementwise);
TORCHTPU_LOWERING("aten::maximum", binary_fn(max_nan), kElementwise);
TORCHTPU_LOWERING("aten::minimum", binary_fn(min_nan), kElementwise);
TORCHTPU_LOWERING("aten::fmax", binary_fn(fmax_fn), kElementwise);
TORCHTPU_LOWERING("aten::fmin", binary_fn(fmin_fn), kElementwise);
// The CPU has no integer hypot: refused here, so the CPU fallback raises the CPU's own error at
// the call instead of XLA refusing the module when it compiles in the background.
std::vector<Value> lower_hypot(LoweringContext& ctx) {
  ElementType ct = compute_dtype(ctx);
  TORCH_CHECK_NOT_IMPLEMENTED(is_fp(ct), "hypot of integral values (the CPU has none)");
  return {finish(ctx, hypot_fn(ctx.b, operand(ctx, 0, ct), operand(ctx, 1, ct)))};
}
TORCHTPU_LOWERING("aten::hypot", lower_hypot, kElementwise);
TORCHTPU_LOWERING("aten::copysign.Tensor", binary_fn(copy_sign), kElementwise);
TORCHTPU_LOWERING("aten::copysign.Scalar", binary_fn(copy_sign), kElementwise);
TORCHTPU_LOWERING("aten::xlogy.Tensor", binary_fn(xlogy_fn), kElementwise);
TORCHTPU_LOWERING("aten::xlogy.Scalar_Self", binary_fn(xlogy_fn), kElementwise);
TORCHTPU_LOWERING("aten::xlogy.Scalar_Other", binary_fn(xlogy_fn), kElementwise);
TORCHTPU_LOWERING("aten::lerp.Scalar", lower_lerp, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::lerp.Tensor", lower_lerp, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::addcmul", addc("stablehlo.multiply"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::addcdiv", addc("stablehlo.divide"), kComplex | kElementwise);

}  // namespace
}  // namespace torchtpu::lowering
