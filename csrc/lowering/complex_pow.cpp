// Complex power as PyTorch's CPU computes it on Linux. Its kernels call std::pow on
// std::complex, which libstdc++ hands to glibc's cpow: cexp(y * clog(x)), where the product
// follows C99 Annex G (libgcc's __muldc3 / __mulsc3: a product whose naive parts are both NaN
// is recomputed with infinities boxed to +-1 and NaNs to +-0) and clog/cexp return glibc's
// special values. At zeros, infinities and NaNs that differs from XLA's power (1j ** (1 + inf j)
// is -0 on the CPU, NaN in XLA; 0 ** (1 + inf j) is NaN on the CPU, 0 in XLA), so the power is
// built here from those three steps on the real and imaginary parts. Finite results agree with
// XLA's within rounding. Other C libraries (macOS's libc++, MSVC) compute pow themselves and
// give other special values; the reference is glibc's, which tests/python/test_complex_ops.py
// also checks against through ctypes.
#include "lowering/complex_pow.h"

#include <cmath>
#include <limits>

#include "lowering/elementwise_util.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

struct Parts {
  Value re, im;
};

// glibc's clog: (log|x|, atan2(im, re)). std::abs's rules (inf if a part is infinite, else
// NaN if one is NaN) and C's atan2 (signed zeros, infinities, NaN) give its special values:
// -inf + (+-0 or +-pi) j at a zero, NaN imaginary part with a NaN part.
Parts clog(FunctionBuilder& b, Value x) {
  return {b.unary("stablehlo.log", complex_abs(b, x)),
          b.binary("stablehlo.atan2", imag_part(b, x), real_part(b, x))};
}

// Annex G's complex product (libgcc's __muldc3), part by part.
Parts annex_g_mul(FunctionBuilder& b, Parts l, Parts r) {
  Value a = l.re, bb = l.im, c = r.re, d = r.im;
  Value ac = b.mul(a, c), bd = b.mul(bb, d), ad = b.mul(a, d), bc = b.mul(bb, c);
  Parts naive{b.sub(ac, bd), b.add(ad, bc)};
  // +-1 for an infinity, +-0 otherwise; +-0 for a NaN, the value otherwise.
  auto box = [&](Value v) {
    return copy_sign(b, b.select(is_inf(b, v), cst(b, 1, v), cst(b, 0, v)), v);
  };
  auto unnan = [&](Value v) { return b.select(is_nan(b, v), copy_sign(b, cst(b, 0, v), v), v); };
  Value inf_l = lor(b, is_inf(b, a), is_inf(b, bb));
  Value inf_r = lor(b, is_inf(b, c), is_inf(b, d));
  // An infinite left factor: box it, zero the right's NaNs.
  a = b.select(inf_l, box(a), a);
  bb = b.select(inf_l, box(bb), bb);
  c = b.select(inf_l, unnan(c), c);
  d = b.select(inf_l, unnan(d), d);
  // An infinite right factor: box it, zero the left's NaNs.
  c = b.select(inf_r, box(c), c);
  d = b.select(inf_r, box(d), d);
  a = b.select(inf_r, unnan(a), a);
  bb = b.select(inf_r, unnan(bb), bb);
  // Finite factors whose partial products overflowed: zero every NaN.
  Value overflow =
      land(b, lnot(b, lor(b, inf_l, inf_r)),
           lor(b, lor(b, is_inf(b, ac), is_inf(b, bd)), lor(b, is_inf(b, ad), is_inf(b, bc))));
  a = b.select(overflow, unnan(a), a);
  bb = b.select(overflow, unnan(bb), bb);
  c = b.select(overflow, unnan(c), c);
  d = b.select(overflow, unnan(d), d);
  Value recalc = land(b, land(b, is_nan(b, naive.re), is_nan(b, naive.im)),
                      lor(b, lor(b, inf_l, inf_r), overflow));
  Value inf = cst(b, std::numeric_limits<double>::infinity(), a);
  Parts boxed{b.mul(inf, b.sub(b.mul(a, c), b.mul(bb, d))),
              b.mul(inf, b.add(b.mul(a, d), b.mul(bb, c)))};
  return {b.select(recalc, boxed.re, naive.re), b.select(recalc, boxed.im, naive.im)};
}

// glibc's cexp of p + q j.
Parts cexp(FunctionBuilder& b, Parts z) {
  Value p = z.re, q = z.im;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Value p_fin = shlo::is_finite(b, p), q_fin = shlo::is_finite(b, q);
  Value q_zero = cmp(b, q, cst(b, 0, q), CompareDirection::kEQ);
  Value cos_q = b.unary("stablehlo.cosine", q), sin_q = b.unary("stablehlo.sine", q);
  // Finite p and q: e^p (cos q, sin q), the exponential split in halves where e^p alone would
  // overflow (glibc scales likewise), and exactly (e^p, q) for q = +-0.
  Value ep = b.unary("stablehlo.exponential", p);
  Value half = b.unary("stablehlo.exponential", b.mul(p, cst(b, 0.5, p)));
  Value big = cmp(b, ep, cst(b, inf, ep), CompareDirection::kEQ);
  Value fin_re = b.select(big, b.mul(b.mul(half, cos_q), half), b.mul(ep, cos_q));
  Value fin_im = b.select(big, b.mul(b.mul(half, sin_q), half), b.mul(ep, sin_q));
  fin_re = b.select(q_zero, ep, fin_re);
  fin_im = b.select(q_zero, q, fin_im);
  // p = +-inf: with finite q, (inf or 0) signed like (cos q, sin q), q itself for q = 0; with
  // infinite or NaN q, inf + NaN j for +inf and 0 + (+-0) j for -inf.
  Value neg_p = lt0(b, p);
  Value mag = b.select(neg_p, cst(b, 0, p), cst(b, inf, p));
  Value inf_re = b.select(q_fin, b.select(q_zero, mag, copy_sign(b, mag, cos_q)), mag);
  Value inf_im = b.select(q_fin, b.select(q_zero, q, copy_sign(b, mag, sin_q)),
                          b.select(neg_p, copy_sign(b, cst(b, 0, q), q), cst(b, nan, q)));
  // Finite p with infinite or NaN q: NaN + NaN j. NaN p: NaN + q j for q = +-0, else NaN + NaN j.
  Value p_inf = is_inf(b, p);
  Value nan_v = cst(b, nan, p);
  Value re = b.select(p_fin, b.select(q_fin, fin_re, nan_v), b.select(p_inf, inf_re, nan_v));
  Value im = b.select(p_fin, b.select(q_fin, fin_im, nan_v),
                      b.select(p_inf, inf_im, b.select(q_zero, q, nan_v)));
  return {re, im};
}

}  // namespace

Value complex_pow(FunctionBuilder& b, Value x, Value y) {
  Parts r = cexp(b, annex_g_mul(b, {real_part(b, y), imag_part(b, y)}, clog(b, x)));
  return make_complex(b, r.re, r.im, x.dtype());
}

}  // namespace torchtpu::lowering
