// Assorted math ops PyTorch implements as dedicated CPU kernels: cross/vdot/logspace, frexp,
// angle, logit_backward, renorm, soft/hard shrink, glu, prelu, and the normal-distribution
// helpers erfcx/log_ndtr/ndtri. Each follows the CPU kernel's formula (and its evaluation
// precision where that matters: erfcx/log_ndtr/logspace compute in f64 like CPU's double
// accumulation) so results agree to rounding.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;

Value c_lt(FunctionBuilder& b, Value x, Value y) { return cmp(b, x, y, CompareDirection::kLT); }
Value c_gt(FunctionBuilder& b, Value x, Value y) { return cmp(b, x, y, CompareDirection::kGT); }
Value c_le(FunctionBuilder& b, Value x, Value y) { return cmp(b, x, y, CompareDirection::kLE); }
Value c_ge(FunctionBuilder& b, Value x, Value y) { return cmp(b, x, y, CompareDirection::kGE); }
Value c_eq(FunctionBuilder& b, Value x, Value y) { return cmp(b, x, y, CompareDirection::kEQ); }

// Tensor/Scalar argument i in the result's shape and dtype `t`.
Value arg(LoweringContext& ctx, size_t i, ElementType t) { return operand(ctx, i, t); }

// ---- linalg_cross / vdot ----

std::vector<Value> lower_linalg_cross(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = arg(ctx, 0, out.dtype), y = arg(ctx, 1, out.dtype);
  int64_t dim = wrap_dim(ctx.int_arg(2), out.rank());
  TORCH_CHECK(out.shape[static_cast<size_t>(dim)] == 3, "linalg.cross: dim size must be 3");
  auto comp = [&](Value v, int64_t i) {
    std::vector<int64_t> start(out.shape.size(), 0), limit = out.shape,
                                                     strides(out.shape.size(), 1);
    start[static_cast<size_t>(dim)] = i;
    limit[static_cast<size_t>(dim)] = i + 1;
    return b.slice(v, start, limit, strides);
  };
  Value x0 = comp(x, 0), x1 = comp(x, 1), x2 = comp(x, 2);
  Value y0 = comp(y, 0), y1 = comp(y, 1), y2 = comp(y, 2);
  Value r0 = b.sub(b.mul(x1, y2), b.mul(x2, y1));
  Value r1 = b.sub(b.mul(x2, y0), b.mul(x0, y2));
  Value r2 = b.sub(b.mul(x0, y1), b.mul(x1, y0));
  return {b.concatenate({r0, r1, r2}, dim)};
}

std::vector<Value> lower_vdot(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  TORCH_CHECK_NOT_IMPLEMENTED(out.dtype != ElementType::kPred, "vdot: bool");
  ElementType acc = opmath_type(out.dtype);
  Value x = b.convert(ctx.tensor(0), out.dtype), y = b.convert(ctx.tensor(1), out.dtype);
  if (shlo::is_complex(x.dtype())) x = conj(b, x);  // vdot conjugates its first argument
  Value r = b.dot_general(x, y, {}, {}, {0}, {0}, TensorType(acc, {}));
  return {b.convert(r, out.dtype)};
}

// ---- logspace ----

// As CPU's logspace kernel: start/end cast to the out dtype, a double step, the first half
// counted up from start and the second half down from end, base^v in double.
std::vector<Value> lower_logspace(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  int64_t steps = ctx.int_arg(2);
  double base = ctx.double_arg(3);
  if (out.numel() == 0) return {b.constant(0, out)};
  TensorType t(ElementType::kF64, out.shape);
  Value start = coerce(b, b.convert(ctx.tensor(0), out.dtype), t);
  Value bv = b.constant(base, t);
  if (steps == 1) return {b.convert(b.binary("stablehlo.power", bv, start), out.dtype)};
  Value end = coerce(b, b.convert(ctx.tensor(1), out.dtype), t);
  Value step = b.div(b.sub(end, start), b.constant(static_cast<double>(steps - 1), t));
  Value i = b.iota(t, 0);
  Value up = b.add(start, b.mul(step, i));
  Value down = b.sub(end, b.mul(step, b.sub(b.constant(static_cast<double>(steps - 1), t), i)));
  Value first_half = c_lt(b, i, b.constant(static_cast<double>(steps / 2), t));
  Value e = b.select(first_half, up, down);
  return {b.convert(b.binary("stablehlo.power", bv, e), out.dtype)};
}

// ---- frexp ----

// Mantissa in [0.5, 1) and exponent from the IEEE bits, on integers only (XLA:CPU flushes
// subnormal floats to zero): a subnormal's fraction is normalized with count_leading_zeros.
std::vector<Value> lower_frexp(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType t = ctx.out_type(0).dtype;
  TORCH_CHECK(is_fp(t), "torch.frexp() only supports floating-point dtypes");
  bool f64 = t == ElementType::kF64;
  ElementType ct = f64 ? ElementType::kF64 : ElementType::kF32;
  ElementType it = f64 ? ElementType::kS64 : ElementType::kS32;
  const int64_t width = f64 ? 64 : 32, mant_bits = f64 ? 52 : 23;
  const int64_t exp_mask = f64 ? 0x7ff : 0xff, bias_m1 = f64 ? 1022 : 126;
  Value x = coerce(b, ctx.tensor(0), ctx.out_type(0).with_dtype(ct));
  TensorType itype = x.type.with_dtype(it);
  auto ic = [&](int64_t v) { return b.constant_int(v, itype); };
  Value bits = b.bitcast_convert(x, it);
  Value e = b.binary("stablehlo.and",
                     b.binary("stablehlo.shift_right_logical", bits, ic(mant_bits)), ic(exp_mask));
  const int64_t frac_mask = (int64_t{1} << mant_bits) - 1;
  Value frac = b.binary("stablehlo.and", bits, ic(frac_mask));
  Value sign =
      b.binary("stablehlo.and", bits, ic(std::numeric_limits<int64_t>::min() >> (64 - width)));
  // normal: exponent e - bias + 1, fraction kept
  Value exp_n = b.sub(e, ic(bias_m1));
  // subnormal: leading one at bit k = width-1-clz; exponent k - (bias + mant_bits - 1) + ...
  Value clz = b.unary("stablehlo.count_leading_zeros", frac);
  Value exp_s = b.sub(ic(width - (bias_m1 + mant_bits)), clz);
  Value shift = b.sub(clz, ic(width - 1 - mant_bits));
  Value frac_s =
      b.binary("stablehlo.and", b.binary("stablehlo.shift_left", frac, shift), ic(frac_mask));
  Value is_sub = c_eq(b, e, ic(0));
  Value exp = b.select(is_sub, exp_s, exp_n);
  Value f = b.select(is_sub, frac_s, frac);
  Value mbits =
      b.binary("stablehlo.or", b.binary("stablehlo.or", sign, f), ic(bias_m1 << mant_bits));
  Value m = b.bitcast_convert(mbits, ct);
  Value zero = land(b, is_sub, c_eq(b, frac, ic(0)));
  Value special = lor(b, zero, c_eq(b, e, ic(exp_mask)));
  m = b.select(special, x, m);
  exp = b.select(special, ic(0), exp);
  return {coerce(b, m, ctx.out_type(0)), coerce(b, exp, ctx.out_type(1))};
}

// ---- angle (real inputs) ----

std::vector<Value> lower_angle(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  if (shlo::is_complex(ctx.tensor(0).dtype())) {  // atan2(imag, real)
    Value z = ctx.tensor(0);
    Value a = b.binary("stablehlo.atan2", shlo::imag(b, z), shlo::real(b, z));
    return {coerce(b, a, ctx.out_type())};
  }
  ElementType ct = opmath_type(ctx.out_type().dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(is_fp(ct), "angle: non-float result");
  Value x = arg(ctx, 0, ct);
  // XLA:CPU flushes subnormals to zero, so angle(-1e-42) is 0 here (pi on CPU).
  Value neg = lt0(b, x);
  Value r = b.select(neg, cst(b, kPi, x), cst(b, 0, x));
  r = b.select(is_nan(b, x), x, r);
  return {coerce(b, r, ctx.out_type())};
}

// ---- logit_backward ----

std::vector<Value> lower_logit_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  Value g = arg(ctx, 0, ct), x = arg(ctx, 1, ct);
  Value r = b.div(g, b.mul(x, b.sub(cst(b, 1, x), x)));
  double eps = ctx.is_none(2) ? -1.0 : ctx.double_arg(2);
  if (eps < 0) {
    Value out = lor(b, lt0(b, x), c_gt(b, x, cst(b, 1, x)));
    r = b.select(out, cst(b, kNaN, x), r);
  } else {
    Value out = lor(b, c_lt(b, x, cst(b, eps, x)), c_gt(b, x, cst(b, 1.0 - eps, x)));
    r = b.select(out, cst(b, 0, x), r);
  }
  return {coerce(b, r, ctx.out_type())};
}

// ---- renorm ----

// Each slice along `dim` whose p-norm exceeds maxnorm is scaled to maxnorm / (norm + 1e-7).
std::vector<Value> lower_renorm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(out.dtype);
  TORCH_CHECK(is_fp(ct), "renorm: expected a floating point input");
  Value x = coerce(b, ctx.tensor(0), out.with_dtype(ct));
  int64_t dim = wrap_dim(ctx.int_arg(2), std::max<int64_t>(x.rank(), 1));
  if (x.rank() == 0) return {coerce(b, x, out)};
  std::vector<int64_t> rdims;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != dim) rdims.push_back(d);
  TensorType s(ct, {});
  Value p = coerce(b, ctx.tensor(1), s), maxnorm = coerce(b, ctx.tensor(3), s);
  Value ax = b.unary("stablehlo.abs", x);
  Value zero = b.constant(0, s);
  Value pb = b.broadcast_in_dim(p, x.shape(), {});
  Value powsum = b.reduce_simple(b.binary("stablehlo.power", ax, pb), zero, rdims, "stablehlo.add");
  Value kept_p = b.broadcast_in_dim(p, powsum.shape(), {});
  Value norm = b.binary("stablehlo.power", powsum, b.div(b.constant(1, kept_p.type), kept_p));
  Value mx = b.reduce_simple(ax, zero, rdims, "stablehlo.maximum");
  Value nz =
      b.reduce_simple(b.convert(cmp(b, ax, b.constant(0, ax.type), CompareDirection::kNE), ct),
                      zero, rdims, "stablehlo.add");
  Value l1 = b.reduce_simple(ax, zero, rdims, "stablehlo.add");
  Value pinf = c_eq(b, kept_p, b.constant(kInf, kept_p.type));
  norm = b.select(pinf, mx, norm);
  norm = b.select(c_eq(b, kept_p, b.constant(0, kept_p.type)), nz, norm);
  norm = b.select(c_eq(b, kept_p, b.constant(1, kept_p.type)), l1, norm);
  Value mn = b.broadcast_in_dim(maxnorm, norm.shape(), {});
  Value factor = b.select(c_gt(b, norm, mn), b.div(mn, b.add(norm, b.constant(1e-7, norm.type))),
                          b.constant(1, norm.type));
  Value r = b.mul(x, b.broadcast_in_dim(factor, x.shape(), {dim}));
  return {coerce(b, r, out)};
}

// ---- shrink / glu / prelu ----

std::vector<Value> lower_softshrink(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  Value x = arg(ctx, 0, ct), l = arg(ctx, 1, ct);
  Value r = b.select(c_gt(b, x, l), b.sub(x, l),
                     b.select(c_lt(b, x, b.neg(l)), b.add(x, l), b.mul(x, cst(b, 0, x))));
  return {coerce(b, r, ctx.out_type())};
}

// hardshrink(x) and the shrink backwards: zero inside [-lambda, lambda], else `v`.
LoweringFn shrink_select(size_t value_i, size_t x_i, size_t l_i) {
  return [=](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    ElementType ct = opmath_type(ctx.out_type().dtype);
    Value v = arg(ctx, value_i, ct), x = arg(ctx, x_i, ct), l = arg(ctx, l_i, ct);
    Value inside = land(b, c_ge(b, x, b.neg(l)), c_le(b, x, l));
    return {coerce(b, b.select(inside, cst(b, 0, v), v), ctx.out_type())};
  };
}

std::pair<Value, Value> halves(FunctionBuilder& b, Value x, int64_t dim) {
  std::vector<int64_t> start(x.shape().size(), 0), limit = x.shape(), strides(x.shape().size(), 1);
  int64_t h = x.shape()[static_cast<size_t>(dim)] / 2;
  limit[static_cast<size_t>(dim)] = h;
  Value a = b.slice(x, start, limit, strides);
  start[static_cast<size_t>(dim)] = h;
  limit[static_cast<size_t>(dim)] = 2 * h;
  return {a, b.slice(x, start, limit, strides)};
}

std::vector<Value> lower_glu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  Value x = b.convert(ctx.tensor(0), ct);
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
  TORCH_CHECK(x.shape()[static_cast<size_t>(dim)] % 2 == 0,
              "Halving dimension must be even, but dimension ", dim, " is size ",
              x.shape()[static_cast<size_t>(dim)]);
  auto [a, g] = halves(b, x, dim);
  return {coerce(b, b.mul(a, b.unary("stablehlo.logistic", g)), ctx.out_type())};
}

std::vector<Value> lower_glu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  Value go = b.convert(ctx.tensor(0), ct), x = b.convert(ctx.tensor(1), ct);
  int64_t dim = wrap_dim(ctx.int_arg(2), x.rank());
  auto [a, g] = halves(b, x, dim);
  Value s = b.unary("stablehlo.logistic", g);
  Value ga = b.mul(go, s);
  Value gb = b.mul(b.mul(b.mul(go, a), s), b.sub(cst(b, 1, s), s));
  return {coerce(b, b.concatenate({ga, gb}, dim), ctx.out_type())};
}

// Sums `v` down to `t`'s shape (numpy broadcasting in reverse), then converts.
Value sum_to(FunctionBuilder& b, Value v, const TensorType& t) {
  const auto& vs = v.shape();
  size_t lead = vs.size() - t.shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < vs.size(); ++d) {
    if (d < lead || (t.shape[d - lead] == 1 && vs[d] != 1)) dims.push_back(static_cast<int64_t>(d));
  }
  if (!dims.empty()) {
    v = b.reduce_simple(v, b.constant(0, TensorType(v.dtype(), {})), dims, "stablehlo.add");
  }
  return coerce(b, b.reshape(v, t.shape), t);
}

std::vector<Value> lower_prelu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  Value x = arg(ctx, 0, ct), w = arg(ctx, 1, ct);
  return {coerce(b, b.select(c_gt(b, x, cst(b, 0, x)), x, b.mul(w, x)), ctx.out_type())};
}

std::vector<Value> lower_prelu_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& gx_t = ctx.out_type(0);
  ElementType ct = opmath_type(gx_t.dtype);
  // The broadcast shape of grad, self and weight.
  std::vector<int64_t> full = ctx.tensor(0).shape();
  TensorType ft(ct, full);
  Value g = coerce(b, ctx.tensor(0), ft), x = coerce(b, ctx.tensor(1), ft),
        w = coerce(b, ctx.tensor(2), ft);
  Value pos = c_gt(b, x, cst(b, 0, x));
  Value gx = b.select(pos, g, b.mul(w, g));
  Value gw = b.select(pos, cst(b, 0, x), b.mul(x, g));
  return {sum_to(b, gx, gx_t), sum_to(b, gw, ctx.out_type(1))};
}

// ---- erfcx / log_ndtr / ndtri ----

// exp(x^2) erfc(x) in f64: direct where erfc does not underflow (x < 25), else the
// asymptotic series 1/(x sqrt(pi)) (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6)).
Value erfcx64(FunctionBuilder& b, Value x) {
  Value direct = b.mul(b.unary("stablehlo.exponential", b.mul(x, x)), b.unary("chlo.erfc", x));
  Value big = c_gt(b, x, cst(b, 25, x));
  Value xs = b.select(big, x, cst(b, 25, x));
  Value inv2 = b.div(cst(b, 1, x), b.mul(xs, xs));
  Value series = b.add(cst(b, -15.0 / 8, x), b.mul(inv2, cst(b, 0, x)));
  series = b.add(cst(b, 3.0 / 4, x), b.mul(inv2, series));
  series = b.add(cst(b, -0.5, x), b.mul(inv2, series));
  series = b.add(cst(b, 1, x), b.mul(inv2, series));
  Value asym = b.div(series, b.mul(xs, cst(b, std::sqrt(kPi), x)));
  Value r = b.select(big, asym, direct);
  r = b.select(c_eq(b, x, cst(b, kInf, x)), cst(b, 0, x), r);
  return r;
}

LoweringFn in_f64(std::function<Value(FunctionBuilder&, Value)> f) {
  return [f](LoweringContext& ctx) -> std::vector<Value> {
    const TensorType& out = ctx.out_type();
    TORCH_CHECK(is_fp(out.dtype), ctx.schema().name(), ": expected a floating point result");
    Value x = coerce(ctx.b, ctx.tensor(0), out.with_dtype(ElementType::kF64));
    return {coerce(ctx.b, f(ctx.b, x), out)};
  };
}

Value log_ndtr64(FunctionBuilder& b, Value x) {
  Value t = b.mul(x, cst(b, M_SQRT1_2, x));
  Value low =
      b.sub(b.unary("stablehlo.log", b.div(erfcx64(b, b.neg(t)), cst(b, 2, x))), b.mul(t, t));
  Value high =
      b.unary("stablehlo.log_plus_one", b.div(b.neg(b.unary("chlo.erfc", t)), cst(b, 2, x)));
  return b.select(c_lt(b, x, cst(b, -1, x)), low, high);
}

Value polevl(FunctionBuilder& b, Value x, const double* c, int n) {
  Value r = cst(b, c[0], x);
  for (int i = 1; i <= n; ++i) r = b.add(b.mul(r, x), cst(b, c[i], x));
  return r;
}

// Cephes ndtri, as at::native calc_ndtri (evaluated in the input's opmath dtype like CPU).
Value ndtri(FunctionBuilder& b, Value y0) {
  static const double P0[5] = {-5.99633501014107895267E1, 9.80010754185999661536E1,
                               -5.66762857469070293439E1, 1.39312609387279679503E1,
                               -1.23916583867381258016E0};
  static const double Q0[9] = {
      1.00000000000000000000E0,  1.95448858338141759834E0,  4.67627912898881538453E0,
      8.63602421390890590575E1,  -2.25462687854119370527E2, 2.00260212380060660359E2,
      -8.20372256168333339912E1, 1.59056225126211695515E1,  -1.18331621121330003142E0};
  static const double P1[9] = {
      4.05544892305962419923E0,   3.15251094599893866154E1,   5.71628192246421288162E1,
      4.40805073893200834700E1,   1.46849561928858024014E1,   2.18663306850790267539E0,
      -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4};
  static const double Q1[9] = {
      1.00000000000000000000E0,   1.57799883256466749731E1,   4.53907635128879210584E1,
      4.13172038254672030440E1,   1.50425385692907503408E1,   2.50464946208309415979E0,
      -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4};
  static const double P2[9] = {
      3.23774891776946035970E0,  6.91522889068984211695E0,  3.93881025292474443415E0,
      1.33303460815807542389E0,  2.01485389549179081538E-1, 1.23716634817820021358E-2,
      3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9};
  static const double Q2[9] = {
      1.00000000000000000000E0,  6.02427039364742014255E0,  3.67983563856160859403E0,
      1.37702099489081330271E0,  2.16236993594496635890E-1, 1.34204006088543189037E-2,
      3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9};
  const double e2 = 0.13533528323661269189;
  Value one = cst(b, 1, y0);
  Value flip = c_gt(b, y0, b.sub(one, cst(b, e2, y0)));
  Value y = b.select(flip, b.sub(one, y0), y0);
  // central region
  Value yc = b.sub(y, cst(b, 0.5, y));
  Value y2 = b.mul(yc, yc);
  Value central =
      b.add(yc, b.mul(yc, b.div(b.mul(y2, polevl(b, y2, P0, 4)), polevl(b, y2, Q0, 8))));
  central = b.mul(central, cst(b, 2.50662827463100050242E0, y));
  // tails
  Value ys = b.select(c_gt(b, y, cst(b, e2, y)), cst(b, 0.01, y), y);  // keep log finite
  Value x = b.unary("stablehlo.sqrt", b.mul(cst(b, -2, y), b.unary("stablehlo.log", ys)));
  Value x0 = b.sub(x, b.div(b.unary("stablehlo.log", x), x));
  Value z = b.div(one, x);
  Value x1a = b.div(b.mul(z, polevl(b, z, P1, 8)), polevl(b, z, Q1, 8));
  Value x1b = b.div(b.mul(z, polevl(b, z, P2, 8)), polevl(b, z, Q2, 8));
  Value tail = b.sub(x0, b.select(c_lt(b, x, cst(b, 8, x)), x1a, x1b));
  tail = b.select(flip, tail, b.neg(tail));
  Value r = b.select(c_gt(b, y, cst(b, e2, y)), central, tail);
  r = b.select(c_eq(b, y0, cst(b, 0, y0)), cst(b, -kInf, y0), r);
  r = b.select(c_eq(b, y0, one), cst(b, kInf, y0), r);
  Value bad = lor(b, lt0(b, y0), c_gt(b, y0, one));
  r = b.select(lor(b, bad, is_nan(b, y0)), cst(b, kNaN, y0), r);
  return r;
}

LoweringFn in_opmath(std::function<Value(FunctionBuilder&, Value)> f) {
  return [f](LoweringContext& ctx) -> std::vector<Value> {
    const TensorType& out = ctx.out_type();
    ElementType ct = opmath_type(out.dtype);
    TORCH_CHECK(is_fp(ct), ctx.schema().name(), ": expected a floating point result");
    Value x = coerce(ctx.b, ctx.tensor(0), out.with_dtype(ct));
    return {coerce(ctx.b, f(ctx.b, x), out)};
  };
}

TORCHTPU_LOWERING("aten::linalg_cross", lower_linalg_cross, kComplex);
TORCHTPU_LOWERING("aten::vdot", lower_vdot, kComplex);
TORCHTPU_LOWERING("aten::logspace.out", lower_logspace);
TORCHTPU_LOWERING("aten::logspace.Tensor_Tensor_out", lower_logspace);
TORCHTPU_LOWERING("aten::logspace.Tensor_Scalar_out", lower_logspace);
TORCHTPU_LOWERING("aten::logspace.Scalar_Tensor_out", lower_logspace);
TORCHTPU_LOWERING("aten::frexp.Tensor", lower_frexp);
TORCHTPU_LOWERING("aten::angle", lower_angle, kComplex);
TORCHTPU_LOWERING("aten::logit_backward", lower_logit_backward);
TORCHTPU_LOWERING("aten::renorm", lower_renorm);
TORCHTPU_LOWERING("aten::softshrink", lower_softshrink);
TORCHTPU_LOWERING("aten::softshrink_backward", shrink_select(0, 1, 2));
TORCHTPU_LOWERING("aten::hardshrink", shrink_select(0, 0, 1));
TORCHTPU_LOWERING("aten::hardshrink_backward", shrink_select(0, 1, 2));
TORCHTPU_LOWERING("aten::glu", lower_glu);
TORCHTPU_LOWERING("aten::glu_backward", lower_glu_backward);
TORCHTPU_LOWERING("aten::_prelu_kernel", lower_prelu);
TORCHTPU_LOWERING("aten::_prelu_kernel_backward", lower_prelu_backward);
TORCHTPU_LOWERING("aten::special_erfcx", in_f64(erfcx64));
TORCHTPU_LOWERING("aten::special_log_ndtr", in_f64(log_ndtr64));
TORCHTPU_LOWERING("aten::special_ndtri", in_opmath(ndtri));

}  // namespace
}  // namespace torchtpu::lowering
