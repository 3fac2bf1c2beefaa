// Special functions (gamma family, Bessel functions, zeta, log-sum-exp style binaries). Where
// CHLO has the function (digamma, lgamma, polygamma, zeta, next_after) the plugin's own
// legalization is used; otherwise the lowering follows the algorithm of PyTorch's CPU kernel
// (ATen/native/Math.h: Cephes Chebyshev expansions and rational approximations) so results
// agree with CPU to rounding. f16/bf16 compute in f32 and round once, like the CPU kernels.
#include <ATen/native/Math.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;

Value eq(FunctionBuilder& b, Value x, double v) {
  return cmp(b, x, cst(b, v, x), CompareDirection::kEQ);
}
Value lt(FunctionBuilder& b, Value x, double v) {
  return cmp(b, x, cst(b, v, x), CompareDirection::kLT);
}
Value le(FunctionBuilder& b, Value x, double v) {
  return cmp(b, x, cst(b, v, x), CompareDirection::kLE);
}
Value gt(FunctionBuilder& b, Value x, double v) {
  return cmp(b, x, cst(b, v, x), CompareDirection::kGT);
}
Value sel(FunctionBuilder& b, Value p, double v, Value x) { return b.select(p, cst(b, v, x), x); }
Value exp_(FunctionBuilder& b, Value x) { return b.unary("stablehlo.exponential", x); }
Value log_(FunctionBuilder& b, Value x) { return b.unary("stablehlo.log", x); }
Value sqrt_(FunctionBuilder& b, Value x) { return b.unary("stablehlo.sqrt", x); }
Value floor_(FunctionBuilder& b, Value x) { return b.unary("stablehlo.floor", x); }
Value is_int(FunctionBuilder& b, Value x) { return cmp(b, x, floor_(b, x), CompareDirection::kEQ); }

using Fn1 = std::function<Value(FunctionBuilder&, Value)>;
using Fn2 = std::function<Value(FunctionBuilder&, Value, Value)>;

// f(x) in the result's opmath dtype.
LoweringFn unary(Fn1 f) {
  return [f](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = opmath_type(ctx.out_type().dtype);
    TORCH_CHECK(is_fp(ct), "torchtpu lowering: ", ctx.schema().name(),
                " needs a floating point result");
    Value x = operand(ctx, 0, ct);
    return {coerce(ctx.b, f(ctx.b, x), ctx.out_type())};
  };
}

// f(x, y) with both operands broadcast to the result shape in its opmath dtype.
LoweringFn binary(Fn2 f, size_t i = 0, size_t j = 1) {
  return [f, i, j](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = opmath_type(ctx.out_type().dtype);
    TORCH_CHECK(is_fp(ct), "torchtpu lowering: ", ctx.schema().name(),
                " needs a floating point result");
    Value x = operand(ctx, i, ct), y = operand(ctx, j, ct);
    return {coerce(ctx.b, f(ctx.b, x, y), ctx.out_type())};
  };
}

// Cephes chbevl: sum of coefficients[i] * T_i(x / 2), coefficients highest order first.
Value chbevl(FunctionBuilder& b, Value x, const double* c, size_t n) {
  Value b0 = cst(b, c[0], x), b1 = cst(b, 0, x), b2 = cst(b, 0, x);
  for (size_t i = 1; i < n; ++i) {
    b2 = b1;
    b1 = b0;
    b0 = b.add(b.sub(b.mul(x, b1), b2), cst(b, c[i], x));
  }
  return b.mul(cst(b, 0.5, x), b.sub(b0, b2));
}

using Coeffs = std::tuple<const double*, size_t>;
Value chbevl_of(FunctionBuilder& b, Value x, Coeffs coeffs) {
  return chbevl(b, x, std::get<0>(coeffs), std::get<1>(coeffs));
}

// The two Chebyshev expansions of Cephes' i0e/i1e: |x| <= 8 and |x| > 8 (x = |input|).
// `first`: i1 (x * A(x/2 - 2)) rather than i0 (A(x/2 - 2)).
Value bessel_ie(FunctionBuilder& b, Value x, bool first) {
  Value small = chbevl_of(
      b, b.sub(b.mul(x, cst(b, 0.5, x)), cst(b, 2, x)),
      first ? ::chebyshev_coefficients_i1e_A<double>() : ::chebyshev_coefficients_i0e_A<double>());
  if (first) small = b.mul(small, x);
  Value large = b.div(chbevl_of(b, b.sub(b.div(cst(b, 32, x), x), cst(b, 2, x)),
                                first ? ::chebyshev_coefficients_i1e_B<double>()
                                      : ::chebyshev_coefficients_i0e_B<double>()),
                      sqrt_(b, x));
  return b.select(le(b, x, 8), small, large);
}

Value i0e(FunctionBuilder& b, Value x) { return bessel_ie(b, b.abs(x), false); }
// At |x| = inf Cephes' i0/i1 (the CPU kernels) compute exp(inf) * (chbevl(-2) / sqrt(inf)) =
// inf * 0 = NaN; XLA may reassociate that product, so NaN is chosen explicitly to match.
Value i0(FunctionBuilder& b, Value x) {
  Value ax = b.abs(x);
  return sel(b, eq(b, ax, kInf), kNaN, b.mul(exp_(b, ax), bessel_ie(b, ax, false)));
}
Value odd(FunctionBuilder& b, Value x, Value r) { return b.select(lt0(b, x), b.neg(r), r); }
Value i1e(FunctionBuilder& b, Value x) { return odd(b, x, bessel_ie(b, b.abs(x), true)); }
Value i1(FunctionBuilder& b, Value x) {
  Value ax = b.abs(x);
  Value r = sel(b, eq(b, ax, kInf), kNaN, b.mul(exp_(b, ax), bessel_ie(b, ax, true)));
  return odd(b, x, r);
}

// PyTorch: digamma(+-0) = -+inf (a pole approached from the other side); negative integers NaN.
Value digamma(FunctionBuilder& b, Value x) {
  Value r = b.unary("chlo.digamma", x);
  Value zero = eq(b, x, 0);
  Value signed_inf =
      b.select(lt0(b, b.bitcast_convert(x, shlo::bit_width(x.dtype()) == 64 ? ElementType::kS64
                                                                            : ElementType::kS32)),
               cst(b, kInf, x), cst(b, -kInf, x));
  r = b.select(zero, signed_inf, r);
  return b.select(land(b, lt0(b, x), is_int(b, x)), cst(b, kNaN, x), r);
}

Value lgamma(FunctionBuilder& b, Value x) {
  Value r = b.unary("chlo.lgamma", x);
  // Poles (non-positive integers) and +-inf are +inf in PyTorch.
  Value pole = land(b, le(b, x, 0), is_int(b, x));
  return b.select(lor(b, pole, eq(b, b.abs(x), kInf)), cst(b, kInf, x), r);
}

std::vector<Value> lower_mvlgamma(LoweringContext& ctx) {
  int64_t p = ctx.int_arg(1);
  ElementType ct = opmath_type(ctx.out_type().dtype);
  FunctionBuilder& b = ctx.b;
  Value x = operand(ctx, 0, ct);
  // sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi)
  Value r = cst(b, static_cast<double>(p) * (p - 1) / 4.0 * std::log(kPi), x);
  for (int64_t i = 0; i < p; ++i) r = b.add(r, lgamma(b, b.sub(x, cst(b, i / 2.0, x))));
  return {coerce(b, r, ctx.out_type())};
}

// Hurwitz zeta(x, q): at::native::zeta (Cephes) step for step, in f64 like CPU's accumulate
// type: direct sum until q + i > 9 (or convergence), then Euler-Maclaurin with 12 terms.
Value zeta(FunctionBuilder& b, Value x_in, Value q_in) {
  const TensorType out_t = x_in.type;
  Value x = b.convert(x_in, ElementType::kF64), q = b.convert(q_in, ElementType::kF64);
  constexpr double kMachEp = 1.11022302462515654042E-16;
  static const double A[] = {12.0,
                             -720.0,
                             30240.0,
                             -1209600.0,
                             47900160.0,
                             -1.8924375803183791606e9,
                             7.47242496e10,
                             -2.950130727918164224e12,
                             1.1646782814350067249e14,
                             -4.5979787224074726105e15,
                             1.8152105401943546773e17,
                             -7.1661652561756670113e18};
  Value qpole = land(b, le(b, q, 0), is_int(b, q));
  Value domain = land(b, land(b, le(b, q, 0), b.unary("stablehlo.not", is_int(b, q))),
                      b.unary("stablehlo.not", is_int(b, x)));
  Value special = lor(b, lor(b, le(b, x, 1), qpole), lor(b, domain, is_nan(b, x)));
  auto powm = [&](FunctionBuilder& fb, Value base, Value xx) {
    return fb.binary("stablehlo.power", base, fb.neg(xx));
  };
  // state: x, a, s, b, i, done
  State init = {x, q, powm(b, q, x), cst(b, 0, x), cst(b, 0, x), special};
  State st = elementwise_while(
      b, init,
      [](FunctionBuilder& fb, const State& s) {
        Value cont = lor(fb, lt(fb, s[4], 9), le(fb, s[1], 9));
        return land(fb, fb.unary("stablehlo.not", s[5]), cont);
      },
      [&powm](FunctionBuilder& fb, const State& s, Value) -> State {
        Value i = fb.add(s[4], cst(fb, 1, s[4]));
        Value a = fb.add(s[1], cst(fb, 1, s[1]));
        Value bb = powm(fb, a, s[0]);
        Value sum = fb.add(s[2], bb);
        Value eps_s = fb.mul(cst(fb, kMachEp, sum), sum);
        Value conv = land(fb, cmp(fb, fb.neg(eps_s), bb, CompareDirection::kLT),
                          cmp(fb, bb, eps_s, CompareDirection::kLT));
        return {s[0], a, sum, bb, i, conv};
      });
  Value a = st[1], sum = st[2], bb = st[3], done = st[5];
  Value one = cst(b, 1, x);
  Value w = a;
  sum = b.add(sum, b.div(b.mul(bb, w), b.sub(x, one)));
  sum = b.sub(sum, b.mul(cst(b, 0.5, x), bb));
  Value aa = one, k = cst(b, 0, x);
  Value tail_done = b.constant(0, x.type.with_dtype(ElementType::kPred));
  for (int i = 0; i < 12; ++i) {
    aa = b.mul(aa, b.add(x, k));
    bb = b.div(bb, w);
    Value t = b.div(b.mul(aa, bb), cst(b, A[i], x));
    Value ns = b.add(sum, t);
    sum = b.select(tail_done, sum, ns);
    Value rel = b.abs(b.div(t, ns));
    tail_done = lor(b, tail_done, cmp(b, rel, cst(b, kMachEp, rel), CompareDirection::kLT));
    k = b.add(k, one);
    aa = b.mul(aa, b.add(x, k));
    bb = b.div(bb, w);
    k = b.add(k, one);
  }
  Value r = b.select(done, st[2], sum);
  r = b.select(land(b, qpole, gt(b, x, 1)), cst(b, kInf, x), r);
  r = b.select(land(b, domain, gt(b, x, 1)), cst(b, kNaN, x), r);
  r = b.select(eq(b, x, 1), cst(b, kInf, x), r);
  r = b.select(lt(b, x, 1), cst(b, kNaN, x), r);
  r = b.select(is_nan(b, x), x, r);
  return b.convert(r, out_t.dtype);
}

// at::native trigamma: reflection below 1/2, six recurrence steps, then the asymptotic series.
Value trigamma(FunctionBuilder& b, Value x) {
  Value refl = lt(b, x, 0.5);
  Value spx = b.unary("stablehlo.sine", b.mul(cst(b, kPi, x), x));
  Value result = b.select(refl, b.neg(b.div(cst(b, kPi * kPi, x), b.mul(spx, spx))), cst(b, 0, x));
  Value y = b.select(refl, b.sub(cst(b, 1, x), x), x);
  Value one = cst(b, 1, x);
  for (int i = 0; i < 6; ++i) {
    result = b.add(result, b.div(one, b.mul(y, y)));
    y = b.add(y, one);
  }
  Value ixx = b.div(one, b.mul(y, y));
  Value inner = b.sub(cst(b, 1.0 / 30, x), b.mul(ixx, cst(b, 1.0 / 42, x)));
  inner = b.sub(cst(b, 1.0 / 6, x), b.mul(ixx, inner));
  Value series = b.add(b.add(one, b.div(one, b.mul(cst(b, 2, x), y))), b.mul(ixx, inner));
  result = b.add(result, b.div(series, y));
  return b.select(refl, b.neg(result), result);
}

std::vector<Value> lower_polygamma(LoweringContext& ctx) {
  int64_t n = ctx.int_arg(0);
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  ElementType ct = opmath_type(ctx.out_type().dtype);
  FunctionBuilder& b = ctx.b;
  Value x = operand(ctx, 1, ct);
  Value r;
  if (n == 0) {
    r = digamma(b, x);
  } else if (n == 1) {
    r = trigamma(b, x);
  } else {
    // (-1)^(n+1) n! zeta(n+1, x), as at::native calc_polygamma computes it.
    double fact = std::exp(std::lgamma(static_cast<double>(n) + 1.0));
    if (ct == ElementType::kF32) fact = static_cast<float>(fact);
    Value z = zeta(b, cst(b, static_cast<double>(n + 1), x), x);
    r = b.mul(cst(b, (n % 2 ? 1.0 : -1.0) * fact, x), z);
  }
  return {coerce(b, r, ctx.out_type())};
}

// logaddexp: max + log1p(exp(-|a - b|)); equal infinities return themselves (inf - inf = NaN).
Value logaddexp(FunctionBuilder& b, Value x, Value y, bool base2) {
  Value m = max_nan(b, x, y);
  Value d = b.neg(b.abs(b.sub(x, y)));
  Value r;
  if (base2) {
    constexpr double kLn2 = 0.69314718055994530942;
    Value e = b.binary("stablehlo.power", cst(b, 2, d), d);
    r = b.add(m, b.mul(b.unary("stablehlo.log_plus_one", e), cst(b, 1.0 / kLn2, d)));
  } else {
    r = b.add(m, b.unary("stablehlo.log_plus_one", exp_(b, d)));
  }
  Value same_inf = land(b, eq(b, b.abs(x), kInf), cmp(b, x, y, CompareDirection::kEQ));
  return b.select(same_inf, x, r);
}

Value sinc(FunctionBuilder& b, Value x) {
  Value px = b.mul(cst(b, kPi, x), x);
  Value r = b.div(b.unary("stablehlo.sine", px), px);
  return b.select(eq(b, x, 0), cst(b, 1, x), r);
}

// x * log1p(y), 0 where x == 0 unless y is NaN.
Value xlog1py(FunctionBuilder& b, Value x, Value y) {
  Value r = b.mul(x, b.unary("stablehlo.log_plus_one", y));
  r = b.select(eq(b, x, 0), cst(b, 0, x), r);
  return b.select(is_nan(b, y), y, r);
}

Value entr(FunctionBuilder& b, Value x) {
  Value r = b.neg(b.mul(x, log_(b, x)));
  r = b.select(eq(b, x, 0), cst(b, 0, x), r);
  r = b.select(lt0(b, x), cst(b, -kInf, x), r);
  return b.select(is_nan(b, x), x, r);
}

std::vector<Value> lower_heaviside(LoweringContext& ctx) {
  ElementType t = ctx.out_type().dtype;
  FunctionBuilder& b = ctx.b;
  Value x = operand(ctx, 0, t), v = operand(ctx, 1, t);
  Value zero = b.constant(0, x.type);
  Value pos = b.convert(b.compare(x, zero, CompareDirection::kGT), t);
  Value r = b.select(b.compare(x, zero, CompareDirection::kEQ), v, pos);
  return {r};
}

std::vector<Value> lower_nextafter(LoweringContext& ctx) {
  ElementType t = ctx.out_type().dtype;
  Value x = operand(ctx, 0, t), y = operand(ctx, 1, t);
  return {ctx.b.op("chlo.next_after", {x, y}, x.type)};
}

// ---- orthogonal polynomials P_n(x) (at::native *_polynomial_*_forward, n truncated to an
// integer; NaN/inf n behave as a negative n) ----

struct Poly {
  FunctionBuilder& b;
  Value x, n;  // n: trunc(n) in x's dtype, NaN/inf replaced by -1
  Value c(double v) const { return cst(b, v, x); }
  Value even() const { return eq(b, b.binary("stablehlo.remainder", n, c(2)), 0); }
  // Runs r = step(k, p, q); p = q; q = r for k = k0, k0 + kstep, ... while k < limit (and q is
  // not NaN when nan_stop); returns q.
  Value loop(Value p0, Value q0, double k0, double kstep, Value limit,
             std::function<Value(FunctionBuilder&, Value, Value, Value, Value)> step,
             bool nan_stop) const {
    State init = {x, limit, cst(b, k0, x), p0, q0};
    State st = elementwise_while(
        b, init,
        [nan_stop](FunctionBuilder& fb, const State& s) {
          Value act = cmp(fb, s[2], s[1], CompareDirection::kLT);
          if (nan_stop) act = land(fb, act, fb.unary("stablehlo.not", is_nan(fb, s[4])));
          return act;
        },
        [step, kstep](FunctionBuilder& fb, const State& s, Value) -> State {
          Value r = step(fb, s[2], s[0], s[3], s[4]);
          return {s[0], s[1], fb.add(s[2], cst(fb, kstep, s[2])), s[4], r};
        });
    return st[4];
  }
};

Value trunc_n(FunctionBuilder& b, Value n) {
  Value t = b.select(lt0(b, n), b.unary("stablehlo.ceil", n), floor_(b, n));
  Value bad = lor(b, is_nan(b, n), eq(b, b.abs(n), kInf));
  return b.select(bad, cst(b, -1, n), t);
}

// Chebyshev-type three-term recurrence r = 2y q - p from k = 2 to n.
Value cheb_loop(const Poly& P, Value y, Value q0) {
  return P.loop(
      P.c(1), q0, 2, 1, P.b.add(P.n, P.c(1)),
      [y](FunctionBuilder& fb, Value, Value, Value p, Value q) {
        return fb.sub(fb.mul(fb.add(y, y), q), p);
      },
      true);
}

// The branches every polynomial shares, applied last to first: n < 0 -> 0, then specials.
Value chebyshev(FunctionBuilder& b, Value x, Value n_in, char kind, bool shifted) {
  Poly P{b, x, trunc_n(b, n_in)};
  Value n = P.n;
  Value y = shifted ? b.sub(b.add(x, x), P.c(1)) : x;
  Value n1 = b.add(n, P.c(1)), n21 = b.add(b.add(n, n), P.c(1));
  auto by_parity = [&](Value v) { return b.select(P.even(), v, b.neg(v)); };
  Value q1, r;
  double big = 8;
  switch (kind) {
    case 't':
      q1 = y;
      big = 6;
      break;
    case 'u':
      q1 = b.add(y, y);
      big = shifted ? 6 : 8;
      break;
    case 'v':
      q1 = b.sub(b.add(y, y), P.c(1));
      big = shifted ? 6 : 8;
      break;
    default:
      q1 = b.add(b.add(y, y), P.c(1));
      big = shifted ? 4 : 8;
      break;
  }
  r = cheb_loop(P, y, q1);
  r = b.select(eq(b, n, 1), q1, r);
  r = b.select(eq(b, n, 0), P.c(1), r);
  // large n inside (-1, 1): trigonometric closed forms
  Value t = b.unary("chlo.acos", y);
  Value trig;
  switch (kind) {
    case 't':
      trig = b.unary("stablehlo.cosine", b.mul(n, t));
      break;
    case 'u': {
      Value st = b.unary("stablehlo.sine", t);
      Value a = b.div(b.unary("stablehlo.sine", b.mul(n1, t)), st);
      Value z = b.div(b.mul(n1, b.unary("stablehlo.cosine", b.mul(n1, t))), y);
      trig = b.select(eq(b, st, 0), z, a);
      break;
    }
    case 'v': {
      Value h = b.div(t, P.c(2));
      Value a = b.div(b.unary("stablehlo.cosine", b.mul(b.add(n, P.c(0.5)), t)),
                      b.unary("stablehlo.cosine", h));
      trig = b.select(eq(b, b.unary("stablehlo.sine", h), 1), by_parity(n21), a);
      break;
    }
    default: {
      Value h = b.div(t, P.c(2));
      Value a = b.div(b.unary("stablehlo.sine", b.mul(b.add(n, P.c(0.5)), t)),
                      b.unary("stablehlo.sine", h));
      Value fallback = shifted ? by_parity(P.c(1)) : b.select(gt(b, x, 0), n21, by_parity(P.c(1)));
      trig = b.select(eq(b, b.unary("stablehlo.cosine", h), 1), fallback, a);
      break;
    }
  }
  Value use_trig = land(b, gt(b, n, big), lt(b, b.abs(y), 1));
  r = b.select(use_trig, trig, r);
  // the endpoints
  if (!shifted) {
    Value at1 = eq(b, b.abs(x), 1), pos = gt(b, x, 0);
    Value e;
    switch (kind) {
      case 't':
        e = b.select(lor(b, pos, P.even()), P.c(1), P.c(-1));
        break;
      case 'u':
        e = b.select(lor(b, pos, P.even()), n1, b.neg(n1));
        break;
      case 'v':
        e = b.select(pos, P.c(1), by_parity(n21));
        break;
      default:
        e = b.select(pos, n21, by_parity(P.c(1)));
        break;
    }
    r = b.select(at1, e, r);
  } else {
    Value e1, e0;
    switch (kind) {
      case 't':
        e1 = P.c(1);
        e0 = by_parity(P.c(1));
        break;
      case 'u':
        e1 = n1;
        e0 = by_parity(n1);
        break;
      case 'v':
        e1 = P.c(1);
        e0 = by_parity(n21);
        break;
      default:
        e1 = n21;
        e0 = by_parity(P.c(1));
        break;
    }
    r = b.select(eq(b, x, 0), e0, r);
    r = b.select(eq(b, x, 1), e1, r);
  }
  return b.select(lt0(b, n), P.c(0), r);
}

Value hermite(FunctionBuilder& b, Value x, Value n_in, bool physicists) {
  Poly P{b, x, trunc_n(b, n_in)};
  Value n = P.n;
  Value q1 = physicists ? b.add(x, x) : x;
  Value r;
  if (physicists) {
    r = P.loop(
        P.c(1), q1, 2, 2, b.add(n, n),
        [](FunctionBuilder& fb, Value k, Value xx, Value p, Value q) {
          return fb.sub(fb.mul(fb.add(xx, xx), q), fb.mul(k, p));
        },
        false);
  } else {
    r = P.loop(
        P.c(1), q1, 1, 1, n,
        [](FunctionBuilder& fb, Value k, Value xx, Value p, Value q) {
          return fb.sub(fb.mul(xx, q), fb.mul(k, p));
        },
        false);
  }
  double limit = x.dtype() == ElementType::kF64 ? 512 : 128;
  r = b.select(gt(b, n, limit), P.c(kNaN), r);
  r = b.select(eq(b, n, 1), q1, r);
  r = b.select(eq(b, n, 0), P.c(1), r);
  return b.select(lt0(b, n), P.c(0), r);
}

Value laguerre(FunctionBuilder& b, Value x, Value n_in) {
  Poly P{b, x, trunc_n(b, n_in)};
  Value n = P.n;
  Value q1 = b.sub(P.c(1), x);
  Value r = P.loop(
      P.c(1), q1, 1, 1, n,
      [](FunctionBuilder& fb, Value k, Value xx, Value p, Value q) {
        Value one = cst(fb, 1, xx);
        Value a = fb.mul(fb.add(fb.add(k, k), fb.sub(one, xx)), q);
        return fb.div(fb.sub(a, fb.mul(k, p)), fb.add(k, one));
      },
      true);
  r = b.select(eq(b, n, 1), q1, r);
  r = b.select(eq(b, n, 0), P.c(1), r);
  r = b.select(eq(b, b.abs(x), 0), P.c(1), r);
  return b.select(lt0(b, n), P.c(0), r);
}

Value legendre(FunctionBuilder& b, Value x, Value n_in) {
  Poly P{b, x, trunc_n(b, n_in)};
  Value n = P.n;
  Value r = P.loop(
      P.c(1), x, 1, 1, n,
      [](FunctionBuilder& fb, Value k, Value xx, Value p, Value q) {
        Value one = cst(fb, 1, xx);
        Value a = fb.mul(fb.mul(fb.add(fb.add(k, k), one), xx), q);
        return fb.div(fb.sub(a, fb.mul(k, p)), fb.add(k, one));
      },
      true);
  r = b.select(eq(b, n, 1), x, r);
  r = b.select(eq(b, n, 0), P.c(1), r);
  Value at1 = eq(b, b.abs(x), 1);
  r = b.select(at1, b.select(lor(b, gt(b, x, 0), P.even()), P.c(1), P.c(-1)), r);
  return b.select(lt0(b, n), P.c(0), r);
}

LoweringFn poly(std::function<Value(FunctionBuilder&, Value, Value)> f) { return binary(f); }

// The Tensor-Tensor polynomial lowering serves the x_scalar and n_scalar overloads too
// (compiled graphs keep them; operands are read as Tensor or Scalar alike).
struct PolyRegistrar {
  PolyRegistrar(const std::string& name, const LoweringFn& fn) {
    for (const char* ov : {"", ".x_scalar", ".n_scalar"})
      register_lowering("aten::" + name + ov, fn);
  }
};

TORCHTPU_LOWERING("aten::digamma", unary(digamma));
TORCHTPU_LOWERING("aten::special_digamma", unary(digamma));
TORCHTPU_LOWERING("aten::special_psi", unary(digamma));
TORCHTPU_LOWERING("aten::lgamma", unary(lgamma));
TORCHTPU_LOWERING("aten::special_gammaln", unary(lgamma));
TORCHTPU_LOWERING("aten::polygamma", lower_polygamma);
TORCHTPU_LOWERING("aten::mvlgamma", lower_mvlgamma);
TORCHTPU_LOWERING("aten::i0", unary(i0));
TORCHTPU_LOWERING("aten::special_i0e", unary(i0e));
TORCHTPU_LOWERING("aten::special_i1", unary(i1));
TORCHTPU_LOWERING("aten::special_i1e", unary(i1e));
TORCHTPU_LOWERING("aten::special_zeta", binary(zeta));
TORCHTPU_LOWERING("aten::special_zeta.self_scalar", binary(zeta));
TORCHTPU_LOWERING("aten::special_zeta.other_scalar", binary(zeta));
TORCHTPU_LOWERING("aten::logaddexp", binary([](FunctionBuilder& b, Value x, Value y) {
                    return logaddexp(b, x, y, false);
                  }));
TORCHTPU_LOWERING("aten::logaddexp2", binary([](FunctionBuilder& b, Value x, Value y) {
                    return logaddexp(b, x, y, true);
                  }));
TORCHTPU_LOWERING("aten::sinc", unary(sinc));
TORCHTPU_LOWERING("aten::special_xlog1py", binary(xlog1py));
TORCHTPU_LOWERING("aten::special_xlog1py.self_scalar", binary(xlog1py));
TORCHTPU_LOWERING("aten::special_xlog1py.other_scalar", binary(xlog1py));
TORCHTPU_LOWERING("aten::special_entr", unary(entr));
TORCHTPU_LOWERING("aten::heaviside", lower_heaviside);
TORCHTPU_LOWERING("aten::nextafter", lower_nextafter);

// The Chebyshev polynomials of the first to fourth kind (t, u, v, w), each also shifted to [0, 1].
const bool kChebyshevRegistered = [] {
  for (char kind : {'t', 'u', 'v', 'w'}) {
    for (bool shifted : {false, true}) {
      PolyRegistrar(
          std::string("special_") + (shifted ? "shifted_" : "") + "chebyshev_polynomial_" + kind,
          poly([kind, shifted](FunctionBuilder& b, Value x, Value n) {
            return chebyshev(b, x, n, kind, shifted);
          }));
    }
  }
  return true;
}();
static const PolyRegistrar kHermiteH("special_hermite_polynomial_h",
                                     poly([](FunctionBuilder& b, Value x, Value n) {
                                       return hermite(b, x, n, true);
                                     }));
static const PolyRegistrar kHermiteHe("special_hermite_polynomial_he",
                                      poly([](FunctionBuilder& b, Value x, Value n) {
                                        return hermite(b, x, n, false);
                                      }));
static const PolyRegistrar kLaguerre("special_laguerre_polynomial_l", poly(laguerre));
static const PolyRegistrar kLegendre("special_legendre_polynomial_p", poly(legendre));

}  // namespace
}  // namespace torchtpu::lowering
