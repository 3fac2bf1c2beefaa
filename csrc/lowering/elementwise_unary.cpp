// Unary elementwise math. Integer inputs of float ops promote to the result dtype PyTorch
// reports (out_type); f16/bf16 math runs in f32 and rounds once, like PyTorch's CPU kernels,
// so transcendental results match CPU within tolerance. Functions StableHLO lacks (asin,
// sinh, erf, ...) use CHLO, which the PJRT plugins' StableHLO parsers legalize.
#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

using shlo::CompareDirection;

constexpr double kInf = std::numeric_limits<double>::infinity();

// XLA's chlo.erf saturates at 1 - 3 ulp (erf(inf) = 0.99999982 in f32); 1 - erfc(|x|) is
// exact there, and gelu(-inf) = -inf * (1 + erf(-inf)) must be NaN as in PyTorch.
Value erf_accurate(FunctionBuilder& b, Value x) {
  Value ax = b.unary("stablehlo.abs", x);
  Value tail = b.sub(cst(b, 1, x), b.unary("chlo.erfc", ax));
  tail = b.select(lt0(b, x), b.neg(tail), tail);
  Value small = cmp(b, ax, cst(b, 1, x), CompareDirection::kLT);
  return b.select(small, b.unary("chlo.erf", x), tail);
}

double max_finite(ElementType t) {
  switch (t) {
    case ElementType::kF16:
      return 65504.0;
    case ElementType::kBF16:
      return 3.3895313892515355e38;
    case ElementType::kF32:
      return std::numeric_limits<float>::max();
    default:
      return std::numeric_limits<double>::max();
  }
}

// The input broadcast to the result shape, in dtype `dt`.
Value input(LoweringContext& ctx, ElementType dt) {
  return coerce(ctx.b, ctx.tensor(0), ctx.out_type().with_dtype(dt));
}

// f(x) evaluated in the result's opmath dtype (integer inputs convert to the float result).
LoweringFn float_math(UnaryFn f) {
  return [f](LoweringContext& ctx) -> std::vector<Value> {
    return {finish(ctx, f(ctx.b, input(ctx, opmath_type(ctx.out_type().dtype))))};
  };
}

LoweringFn float_op(const char* name) { return float_math(unary_fn(name)); }

// ---- complex formulas where XLA's own differ from CPU ----

// x * cosh(t), or x * sinh(t), for the complex sin/cos/sinh/cosh below. Unlike XLA's complex
// sine, whose e^b - e^-b cancels (sin(1e-8 + 1e-8j) loses its imaginary part), chlo.sinh is
// accurate near 0. For |t| > 20, cosh(t) and |sinh(t)| are e^|t| / 2 to working precision and
// are applied as two half-exponent factors, so a finite product does not overflow (as CPU's
// csin). A zero x gives an exact signed zero, as C99 specifies, even where cosh(t) is inf.
Value times_hyperbolic(FunctionBuilder& b, Value x, Value t, bool sinh) {
  Value direct = b.mul(x, b.unary(sinh ? "chlo.sinh" : "chlo.cosh", t));
  Value at = b.unary("stablehlo.abs", t);
  Value h = b.unary("stablehlo.exponential", b.mul(at, cst(b, 0.5, t)));
  Value scaled = b.mul(b.mul(b.mul(x, cst(b, 0.5, x)), h), h);
  if (sinh) scaled = b.select(signbit(b, t), b.neg(scaled), scaled);
  Value r = b.select(cmp(b, at, cst(b, 20, t), CompareDirection::kGT), scaled, direct);
  Value zero_result = sinh ? b.select(signbit(b, t), b.neg(x), x) : x;
  return b.select(cmp(b, x, cst(b, 0, x), CompareDirection::kEQ), zero_result, r);
}

enum class Trig { kSin, kCos, kSinh, kCosh };

// sin/cos/sinh/cosh: XLA's op for real x; for z = a + bi the textbook part formulas,
//   sin z = sin a cosh b + i cos a sinh b      cos z = cos a cosh b - i sin a sinh b
//   sinh z = sinh a cos b + i cosh a sin b     cosh z = cosh a cos b + i sinh a sin b
UnaryFn trig(Trig f) {
  return [f](FunctionBuilder& b, Value z) -> Value {
    if (!shlo::is_complex(z.dtype())) {
      const char* op = f == Trig::kSin    ? "stablehlo.sine"
                       : f == Trig::kCos  ? "stablehlo.cosine"
                       : f == Trig::kSinh ? "chlo.sinh"
                                          : "chlo.cosh";
      return b.unary(op, z);
    }
    Value a = real_part(b, z), y = imag_part(b, z);
    Value re, im;
    if (f == Trig::kSin || f == Trig::kCos) {
      Value sa = b.unary("stablehlo.sine", a), ca = b.unary("stablehlo.cosine", a);
      re = times_hyperbolic(b, f == Trig::kSin ? sa : ca, y, false);
      im = times_hyperbolic(b, f == Trig::kSin ? ca : b.neg(sa), y, true);
    } else {
      Value sy = b.unary("stablehlo.sine", y), cy = b.unary("stablehlo.cosine", y);
      re = times_hyperbolic(b, cy, a, f == Trig::kSinh);
      im = times_hyperbolic(b, sy, a, f == Trig::kCosh);
    }
    return make_complex(b, re, im, z.dtype());
  };
}

// atanh of x + iy as its two parts, by C99 Annex G (what the CPU's std::atanh, glibc's catanh,
// returns; Python's cmath follows the same table). atanh is odd and conj-symmetric, so it is
// evaluated at |x| + i|y| and each part takes its input part's sign bit: zeros, the side of the
// branch cut (|x| > 1 with y = +-0) and NaN-signed inputs come out as glibc's. XLA's chlo.atanh
// gives the finite values there; the infinite and NaN inputs follow the standard's table, where
// XLA made NaN or the wrong limit of most of them (atanh(NaN + inf j) is +-0 + pi/2 j).
std::pair<Value, Value> complex_atanh(FunctionBuilder& b, Value x, Value y, ElementType ct) {
  Value ax = b.unary("stablehlo.abs", x), ay = b.unary("stablehlo.abs", y);
  Value w = b.unary("chlo.atanh", make_complex(b, ax, ay, ct));
  Value wr = real_part(b, w), wi = imag_part(b, w);
  Value zero = cst(b, 0, wr), half_pi = cst(b, M_PI / 2, wr);
  Value nan = cst(b, std::numeric_limits<double>::quiet_NaN(), wr);
  Value x_inf = is_inf(b, ax), y_inf = is_inf(b, ay);
  Value x_nan = is_nan(b, ax), y_nan = is_nan(b, ay);
  Value x_zero = cmp(b, ax, zero, CompareDirection::kEQ);
  // catanh(x + i inf) = +0 + i pi/2 for any x (NaN too); catanh(inf + iy) = +0 + i pi/2 for
  // finite y; catanh(inf + i NaN) = +0 + i NaN; catanh(+0 + i NaN) = +0 + i NaN; any other NaN
  // part gives NaN + i NaN.
  Value to_half_pi = lor(b, y_inf, land(b, x_inf, lnot(b, y_nan)));
  Value any_nan = lor(b, x_nan, y_nan);
  Value re = b.select(any_nan, nan, wr);
  re = b.select(lor(b, lor(b, y_inf, x_inf), land(b, x_zero, y_nan)), zero, re);
  Value im = b.select(any_nan, nan, wi);
  im = b.select(to_half_pi, half_pi, im);
  return {copy_sign(b, re, x), copy_sign(b, im, y)};
}

Value atanh_fn(FunctionBuilder& b, Value z) {
  if (!shlo::is_complex(z.dtype())) return b.unary("chlo.atanh", z);
  auto [re, im] = complex_atanh(b, real_part(b, z), imag_part(b, z), z.dtype());
  return make_complex(b, re, im, z.dtype());
}

// atan z = -i atanh(iz), with iz = -y + ix: atanh(-y + ix) = u + iv gives atan z = v - iu.
Value atan_fn(FunctionBuilder& b, Value z) {
  if (!shlo::is_complex(z.dtype())) return b.unary("chlo.atan", z);
  auto [u, v] = complex_atanh(b, b.neg(imag_part(b, z)), real_part(b, z), z.dtype());
  return make_complex(b, v, b.neg(u), z.dtype());
}

// Exact on floats and the identity on integers and bool (floor, ceil, round, trunc).
LoweringFn integral_identity(UnaryFn f) {
  return [f](LoweringContext& ctx) -> std::vector<Value> {
    Value x = input(ctx, ctx.out_type().dtype);
    return {is_fp(x.dtype()) ? f(ctx.b, x) : x};
  };
}

// How a float predicate extends to complex values: CPU's isnan/isinf hold when either part
// does, isfinite when both do; isposinf/isneginf refuse complex input.
enum class OnComplex { kEitherPart, kBothParts, kReject };

// A predicate on the input in its own dtype; `int_value` is the answer for integers and bool.
LoweringFn float_predicate(UnaryFn f, bool int_value, OnComplex on_complex = OnComplex::kReject) {
  return [f, int_value, on_complex](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    if (shlo::is_complex(x.dtype())) {
      TORCH_CHECK(on_complex != OnComplex::kReject, ctx.schema().name(),
                  " does not support complex inputs.");
      FunctionBuilder& b = ctx.b;
      Value re = f(b, real_part(b, x)), im = f(b, imag_part(b, x));
      return {finish(ctx, on_complex == OnComplex::kEitherPart
                              ? lor(b, re, im)
                              : b.binary("stablehlo.and", re, im))};
    }
    if (!is_fp(x.dtype())) return {full_like_type(ctx.b, int_value ? 1 : 0, ctx.out_type())};
    // float8 widens exactly first: an infinity constant in a format without one would be its
    // largest value (e4m3fn) or its NaN (fnuz).
    if (shlo::is_float8(x.dtype())) x = ctx.b.convert(x, ElementType::kF32);
    return {finish(ctx, f(ctx.b, x))};
  };
}

std::vector<Value> lower_abs(LoweringContext& ctx) {
  if (shlo::is_complex(ctx.tensor(0).dtype())) {  // |z|, a real result
    return {coerce(ctx.b, complex_abs(ctx.b, ctx.tensor(0)), ctx.out_type())};
  }
  Value x = input(ctx, ctx.out_type().dtype);
  if (shlo::is_unsigned_int(x.dtype()) || x.dtype() == ElementType::kPred) return {x};
  if (shlo::is_float8(x.dtype())) {
    // The CPU's float8 abs is `x < 0 ? -x : x`: -0 stays -0 (and NaN keeps its sign).
    Value zero = ctx.b.constant(0.0, x.type);
    return {ctx.b.select(ctx.b.compare(x, zero, shlo::CompareDirection::kLT), ctx.b.neg(x), x)};
  }
  return {ctx.b.unary("stablehlo.abs", x)};
}

std::vector<Value> lower_neg(LoweringContext& ctx) {
  return {ctx.b.neg(input(ctx, ctx.out_type().dtype))};
}

// (x > 0) - (x < 0): sign(NaN) and sign(-0.0) are +0 in PyTorch, unlike stablehlo.sign.
std::vector<Value> lower_sign(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = input(ctx, ctx.out_type().dtype);
  if (shlo::is_complex(x.dtype())) {
    // sgn: z / |z| part by part, as CPU divides by the real |z| (sgn(inf + 0j) = NaN + 0j); 0 at 0.
    Value mag = complex_abs(b, x);
    Value zero = cst(b, 0, mag);
    Value is0 = cmp(b, mag, zero, CompareDirection::kEQ);
    Value safe = b.select(is0, cst(b, 1, mag), mag);
    Value r =
        make_complex(b, b.div(real_part(b, x), safe), b.div(imag_part(b, x), safe), x.dtype());
    return {b.select(is0, cst(b, 0, x), r)};
  }
  if (x.dtype() == ElementType::kPred) return {x};
  Value pos = b.convert(cmp(b, x, cst(b, 0, x), CompareDirection::kGT), x.dtype());
  if (shlo::is_unsigned_int(x.dtype())) return {pos};
  return {b.sub(pos, b.convert(lt0(b, x), x.dtype()))};
}

std::vector<Value> lower_round_decimals(LoweringContext& ctx) {
  int64_t decimals = ctx.int_arg(ctx.index_of("decimals"));
  ElementType out = ctx.out_type().dtype;
  TORCH_CHECK(is_fp(out), "torchtpu lowering: round.decimals needs a floating point input");
  FunctionBuilder& b = ctx.b;
  Value x = input(ctx, opmath_type(out));
  // Same ten_pow and operation order as at::native round_decimals_kernel.
  double scale = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  if (x.dtype() == ElementType::kF32) scale = static_cast<float>(scale);
  Value s = cst(b, scale, x);
  Value r = decimals < 0 ? b.mul(b.unary("stablehlo.round_nearest_even", b.div(x, s)), s)
                         : b.div(b.unary("stablehlo.round_nearest_even", b.mul(x, s)), s);
  return {finish(ctx, r)};
}

// log(z / (1 - z)) with z clamped to [eps, 1 - eps] when eps is given (eps < 0: no clamp).
// For f16/bf16 this runs wholly in f32 like CUDA; PyTorch's CPU kernel rounds z / (1 - z) to
// the input dtype first, which loses up to a few % near z = 0.5 (XLA's excess-precision
// passes would drop such a rounding anyway).
std::vector<Value> lower_logit(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = input(ctx, opmath_type(ctx.out_type().dtype));
  size_t eps_i = ctx.index_of("eps");
  if (!ctx.is_none(eps_i) && ctx.double_arg(eps_i) >= 0) {
    double eps = ctx.double_arg(eps_i);
    Value lo = cst(b, eps, x), hi = cst(b, 1.0 - eps, x);
    x = b.select(cmp(b, x, lo, CompareDirection::kLT), lo,
                 b.select(cmp(b, x, hi, CompareDirection::kGT), hi, x));
  }
  Value r = b.unary("stablehlo.log", b.div(x, b.sub(cst(b, 1, x), x)));
  return {finish(ctx, r)};
}

std::vector<Value> lower_nan_to_num(LoweringContext& ctx) {
  Value x = input(ctx, ctx.out_type().dtype);
  if (!is_fp(x.dtype()) && !shlo::is_complex(x.dtype())) return {x};
  FunctionBuilder& b = ctx.b;
  // Real values, or each part of a complex value as CPU does.
  auto replace = [&](Value v) {
    auto value_or = [&](const char* name, double fallback) {
      size_t i = ctx.index_of(name);
      return cst(b, ctx.is_none(i) ? fallback : ctx.double_arg(i), v);
    };
    double big = max_finite(v.dtype());
    Value r = b.select(is_nan(b, v), value_or("nan", 0.0), v);
    r = b.select(cmp(b, v, cst(b, kInf, v), CompareDirection::kEQ), value_or("posinf", big), r);
    return b.select(cmp(b, v, cst(b, -kInf, v), CompareDirection::kEQ), value_or("neginf", -big),
                    r);
  };
  if (!shlo::is_complex(x.dtype())) return {replace(x)};
  return {make_complex(b, replace(real_part(b, x)), replace(imag_part(b, x)), x.dtype())};
}

std::vector<Value> lower_signbit(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  if (x.dtype() == ElementType::kPred || shlo::is_unsigned_int(x.dtype())) {
    return {full_like_type(ctx.b, 0, ctx.out_type())};
  }
  return {finish(ctx, signbit(ctx.b, x))};
}

std::vector<Value> lower_bitwise_not(LoweringContext& ctx) {
  Value x = input(ctx, ctx.out_type().dtype);
  TORCH_CHECK(!is_fp(x.dtype()), "torchtpu lowering: bitwise_not needs an integer or bool input");
  return {ctx.b.unary("stablehlo.not", x)};
}

std::vector<Value> lower_logical_not(LoweringContext& ctx) {
  Value p = truth(ctx.b, ctx.tensor(0));
  return {finish(ctx, ctx.b.unary("stablehlo.not", p))};
}

std::vector<Value> lower_square(LoweringContext& ctx) {
  ElementType out = ctx.out_type().dtype;
  ElementType ct = is_half(out)                ? ElementType::kF32
                   : out == ElementType::kPred ? ElementType::kS8
                                               : out;
  Value x = input(ctx, ct);
  return {finish(ctx, ctx.b.mul(x, x))};
}

// log(x) / ln(base). A complex log is scaled part by part: a complex product would turn
// log(0) = -inf + 0j into -inf + NaN j.
Value log_scaled(FunctionBuilder& b, Value x, double inv_ln_base) {
  Value l = b.unary("stablehlo.log", x);
  if (!shlo::is_complex(x.dtype())) return b.mul(l, cst(b, inv_ln_base, l));
  Value re = real_part(b, l), im = imag_part(b, l);
  return make_complex(b, b.mul(re, cst(b, inv_ln_base, re)), b.mul(im, cst(b, inv_ln_base, im)),
                      x.dtype());
}

TORCHTPU_LOWERING("aten::abs", reject_bool_result("abs_cpu", lower_abs), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::neg", lower_neg, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::sign", lower_sign, kElementwise);
TORCHTPU_LOWERING("aten::sgn", lower_sign, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::exp", float_op("stablehlo.exponential"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::exp2", float_math([](FunctionBuilder& b, Value x) {
                    return b.binary("stablehlo.power", cst(b, 2, x), x);
                  }),
                  kElementwise);
TORCHTPU_LOWERING("aten::expm1", float_op("stablehlo.exponential_minus_one"),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::log", float_op("stablehlo.log"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::log2", float_math([](FunctionBuilder& b, Value x) {
                    return log_scaled(b, x, 1.4426950408889634);
                  }),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::log10", float_math([](FunctionBuilder& b, Value x) {
                    return log_scaled(b, x, 0.43429448190325176);
                  }),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::log1p", float_op("stablehlo.log_plus_one"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::sqrt",
                  float_math(signed_zero_cut(unary_fn("stablehlo.sqrt"), Cut::kRealAxis)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::rsqrt",
                  float_math(signed_zero_cut(unary_fn("stablehlo.rsqrt"), Cut::kRealAxis)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::reciprocal",
                  float_math([](FunctionBuilder& b, Value x) { return b.div(cst(b, 1, x), x); }),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::sin", float_math(trig(Trig::kSin)), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::cos", float_math(trig(Trig::kCos)), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::tan", float_op("stablehlo.tan"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::tanh", float_op("stablehlo.tanh"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::sigmoid", float_op("stablehlo.logistic"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::asin", float_math(signed_zero_cut(unary_fn("chlo.asin"), Cut::kRealAxis)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::acos", float_math(signed_zero_cut(unary_fn("chlo.acos"), Cut::kRealAxis)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::atan", float_math(atan_fn), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::sinh", float_math(trig(Trig::kSinh)), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::cosh", float_math(trig(Trig::kCosh)), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::asinh",
                  float_math(signed_zero_cut(unary_fn("chlo.asinh"), Cut::kImagAxis)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::acosh",
                  float_math(signed_zero_cut(unary_fn("chlo.acosh"), Cut::kRealAxis)),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::atanh", float_math(atanh_fn), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::erf", float_math(erf_accurate), kElementwise);
TORCHTPU_LOWERING("aten::erfc", float_op("chlo.erfc"), kElementwise);
TORCHTPU_LOWERING("aten::erfinv", float_op("chlo.erf_inv"), kElementwise);
TORCHTPU_LOWERING("aten::floor",
                  reject_bool_result("floor", integral_identity([](FunctionBuilder& b, Value x) {
                                       return b.unary("stablehlo.floor", x);
                                     })),
                  kElementwise);
TORCHTPU_LOWERING("aten::ceil",
                  reject_bool_result("ceil", integral_identity([](FunctionBuilder& b, Value x) {
                                       return b.unary("stablehlo.ceil", x);
                                     })),
                  kElementwise);
TORCHTPU_LOWERING("aten::round",
                  reject_bool_result("round", integral_identity([](FunctionBuilder& b, Value x) {
                                       return b.unary("stablehlo.round_nearest_even", x);
                                     })),
                  kElementwise);
TORCHTPU_LOWERING("aten::trunc", reject_bool_result("trunc", integral_identity(trunc_float)),
                  kElementwise);
TORCHTPU_LOWERING("aten::fix", integral_identity(trunc_float), kElementwise);
TORCHTPU_LOWERING("aten::round.decimals", lower_round_decimals, kElementwise);
// The CPU has no integer frac: the lowering refuses it, so the CPU fallback raises the CPU's
// own error at the call (XLA would refuse the module only when it compiles, in the background).
std::vector<Value> lower_frac(LoweringContext& ctx) {
  TORCH_CHECK_NOT_IMPLEMENTED(is_fp(ctx.out_type().dtype),
                              "frac of integral values (the CPU has none)");
  Value x = input(ctx, opmath_type(ctx.out_type().dtype));
  return {finish(ctx, ctx.b.sub(x, trunc_float(ctx.b, x)))};
}
TORCHTPU_LOWERING("aten::frac", lower_frac, kElementwise);
TORCHTPU_LOWERING("aten::logit", lower_logit, kElementwise);
TORCHTPU_LOWERING("aten::nan_to_num", lower_nan_to_num, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::isnan", float_predicate(is_nan, false, OnComplex::kEitherPart),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::isinf",
                  float_predicate(
                      [](FunctionBuilder& b, Value x) {
                        return cmp(b, b.unary("stablehlo.abs", x), cst(b, kInf, x),
                                   CompareDirection::kEQ);
                      },
                      false, OnComplex::kEitherPart),
                  kComplex | kElementwise);
TORCHTPU_LOWERING(
    "aten::isposinf",
    float_predicate([](FunctionBuilder& b,
                       Value x) { return cmp(b, x, cst(b, kInf, x), CompareDirection::kEQ); },
                    false),
    kElementwise);
TORCHTPU_LOWERING(
    "aten::isneginf",
    float_predicate([](FunctionBuilder& b,
                       Value x) { return cmp(b, x, cst(b, -kInf, x), CompareDirection::kEQ); },
                    false),
    kElementwise);
TORCHTPU_LOWERING("aten::isfinite",
                  float_predicate([](FunctionBuilder& b, Value x) { return shlo::is_finite(b, x); },
                                  true, OnComplex::kBothParts),
                  kComplex | kElementwise);
TORCHTPU_LOWERING("aten::signbit", lower_signbit, kElementwise);
TORCHTPU_LOWERING("aten::bitwise_not", lower_bitwise_not, kElementwise);
TORCHTPU_LOWERING("aten::logical_not", lower_logical_not, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::square", lower_square, kElementwise);

}  // namespace
}  // namespace torchtpu::lowering
