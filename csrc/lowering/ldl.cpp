// LDL^T factorization of real symmetric matrices (linalg_ldl_factor_ex) and its solve
// (linalg_ldl_solve), mirroring LAPACK's unblocked Bunch-Kaufman ?sytf2 / ?sytrs with
// uplo='L' (what the CPU's ?sytrf runs at these sizes): alpha = (1 + sqrt(17)) / 8, 1x1 or
// 2x2 pivots, symmetric interchanges of the trailing submatrix only, 1-based LAPACK `pivots`
// (negative for 2x2 blocks) and `info` = first zero pivot. Each batch element keeps its own
// column index k (a 2x2 step advances it by 2), so the loops run n times and mask finished
// elements. LD is the lower triangle (the upper one is zero, as on CPU).
#include <c10/util/Exception.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;
using Shape = std::vector<int64_t>;

std::vector<int64_t> first_n(size_t n) {
  std::vector<int64_t> dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  return dims;
}

std::vector<int64_t> all_but(size_t rank, size_t d) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < rank; ++i)
    if (i != d) dims.push_back(static_cast<int64_t>(i));
  return dims;
}

Value from_batch(FunctionBuilder& b, Value v, const Shape& shape) {
  return b.broadcast_in_dim(v, shape, first_n(static_cast<size_t>(v.rank())));
}

// v (shape `full` without dim d) broadcast along d.
Value expand(FunctionBuilder& b, Value v, const Shape& full, size_t d) {
  return b.broadcast_in_dim(v, full, all_but(full.size(), d));
}

Value sum_dim(FunctionBuilder& b, Value v, size_t d) {
  return b.reduce_simple(v, b.constant(0, TensorType(v.dtype(), {})), {static_cast<int64_t>(d)},
                         "stablehlo.add");
}

Value max_dim(FunctionBuilder& b, Value v, size_t d, double init) {
  return b.reduce_simple(v, b.constant(init, TensorType(v.dtype(), {})), {static_cast<int64_t>(d)},
                         "stablehlo.maximum");
}

Value min_dim(FunctionBuilder& b, Value v, size_t d, double init) {
  return b.reduce_simple(v, b.constant(init, TensorType(v.dtype(), {})), {static_cast<int64_t>(d)},
                         "stablehlo.minimum");
}

Value iota_s64(FunctionBuilder& b, const Shape& shape, size_t d) {
  return b.iota(TensorType(ElementType::kS64, shape), static_cast<int64_t>(d));
}

Value eq(FunctionBuilder& b, Value x, Value y) { return b.compare(x, y, CompareDirection::kEQ); }
Value ge(FunctionBuilder& b, Value x, Value y) { return b.compare(x, y, CompareDirection::kGE); }
Value gt(FunctionBuilder& b, Value x, Value y) { return b.compare(x, y, CompareDirection::kGT); }
Value lt(FunctionBuilder& b, Value x, Value y) { return b.compare(x, y, CompareDirection::kLT); }
Value land(FunctionBuilder& b, Value p, Value q) { return b.binary("stablehlo.and", p, q); }
Value lor(FunctionBuilder& b, Value p, Value q) { return b.binary("stablehlo.or", p, q); }
Value lnot(FunctionBuilder& b, Value p) { return b.unary("stablehlo.not", p); }
Value absv(FunctionBuilder& b, Value v) { return b.unary("stablehlo.abs", v); }

Value plus(FunctionBuilder& b, Value k, int64_t c) { return b.add(k, b.constant_int(c, k.type)); }

// Shapes of one (batched) problem: `mat` = batch x n x n (or x nrhs), `vec` = batch x n.
struct Dims {
  Shape batch, mat, vec;
  size_t r;  // rank of mat
  int64_t n;
};

// Element idx (batch, s64) of v (batch x n, along its last dim).
Value at(FunctionBuilder& b, const Dims& d, Value v, Value idx) {
  Value vi = iota_s64(b, v.shape(), d.r - 2);
  return sum_dim(b, b.select(eq(b, vi, from_batch(b, idx, v.shape())), v, zeros(b, v.type)),
                 d.r - 2);
}

// Column j (batch, s64) of A: a vector over rows.
Value column(FunctionBuilder& b, const Dims& d, Value a, Value j) {
  Value cols = iota_s64(b, a.shape(), d.r - 1);
  return sum_dim(b, b.select(eq(b, cols, from_batch(b, j, a.shape())), a, zeros(b, a.type)),
                 d.r - 1);
}

// Row i (batch, s64) of A: a vector over columns.
Value row(FunctionBuilder& b, const Dims& d, Value a, Value i) {
  Value rows = iota_s64(b, a.shape(), d.r - 2);
  return sum_dim(b, b.select(eq(b, rows, from_batch(b, i, a.shape())), a, zeros(b, a.type)),
                 d.r - 2);
}

// Swaps rows i and j (batch, s64) of x (batch x n x m).
Value swap_rows(FunctionBuilder& b, const Dims& d, Value x, Value i, Value j) {
  const Shape s = x.shape();
  Value rows = iota_s64(b, s, d.r - 2);
  Value ri = expand(b, row(b, d, x, i), s, d.r - 2), rj = expand(b, row(b, d, x, j), s, d.r - 2);
  return b.select(eq(b, rows, from_batch(b, i, s)), rj,
                  b.select(eq(b, rows, from_batch(b, j, s)), ri, x));
}

Value swap_cols(FunctionBuilder& b, const Dims& d, Value x, Value i, Value j) {
  const Shape s = x.shape();
  Value cols = iota_s64(b, s, d.r - 1);
  Value ci = expand(b, column(b, d, x, i), s, d.r - 1);
  Value cj = expand(b, column(b, d, x, j), s, d.r - 1);
  return b.select(eq(b, cols, from_batch(b, i, s)), cj,
                  b.select(eq(b, cols, from_batch(b, j, s)), ci, x));
}

// max |v| over `mask` (0 where empty) and the first index reaching it (idamax), or `dflt`.
std::pair<Value, Value> iamax(FunctionBuilder& b, const Dims& d, Value v, Value mask, Value dflt) {
  Value vi = iota_s64(b, v.shape(), d.r - 2);
  Value masked = b.select(mask, absv(b, v), zeros(b, v.type));
  Value mx = max_dim(b, masked, d.r - 2, 0);
  Value hit = land(b, mask, eq(b, masked, from_batch(b, mx, v.shape())));
  Value idx = min_dim(b, b.select(hit, vi, b.constant_int(d.n, vi.type)), d.r - 2,
                      static_cast<double>(d.n));
  idx = b.select(eq(b, idx, b.constant_int(d.n, idx.type)), dflt, idx);
  return {mx, idx};
}

struct LDL {
  Value ld, pivots, info;
};

LDL sytf2_lower(FunctionBuilder& b, Value a, const TensorType& piv_t, const TensorType& info_t) {
  Dims d;
  d.mat = a.shape();
  d.r = d.mat.size();
  d.n = d.mat.back();
  d.batch = Shape(d.mat.begin(), d.mat.end() - 2);
  d.vec = Shape(d.mat.begin(), d.mat.end() - 1);
  const int64_t n = d.n;
  const ElementType dt = a.dtype();
  // alpha in the working precision, as LAPACK computes it.
  const double alpha = dt == ElementType::kF32
                           ? static_cast<double>((1.0f + std::sqrt(17.0f)) / 8.0f)
                           : (1.0 + std::sqrt(17.0)) / 8.0;
  TensorType it_t(ElementType::kS64, {});
  TensorType k_t(ElementType::kS64, d.batch);
  // Start from the lower triangle (the CPU kernel copies tril(A) into LD).
  {
    Value rows = iota_s64(b, d.mat, d.r - 2), cols = iota_s64(b, d.mat, d.r - 1);
    a = b.select(ge(b, rows, cols), a, zeros(b, a.type));
  }
  std::vector<Value> init = {b.constant_int(0, it_t), b.constant_int(0, k_t), a,
                             b.constant_int(0, piv_t), b.constant_int(0, info_t)};
  auto cond = [n, it_t](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {ib.compare(st[0], ib.constant_int(n, it_t), CompareDirection::kLT)};
  };
  auto body = [d, n, alpha](FunctionBuilder& ib,
                            const std::vector<Value>& st) -> std::vector<Value> {
    Value it = st[0], k = st[1], A = st[2], piv = st[3], info = st[4];
    const Shape& S = d.mat;
    const Shape& V = d.vec;
    const size_t r = d.r;
    TensorType bt(A.dtype(), d.batch);
    Value active = lt(ib, k, ib.constant_int(n, k.type));
    Value rows = iota_s64(ib, S, r - 2), cols = iota_s64(ib, S, r - 1);
    Value kS = from_batch(ib, k, S);
    Value vi = iota_s64(ib, V, r - 2);
    Value kV = from_batch(ib, k, V);

    // Pivot choice.
    Value ck = column(ib, d, A, k);
    Value absakk = absv(ib, at(ib, d, ck, k));
    auto [colmax, imax] = iamax(ib, d, ck, gt(ib, vi, kV), k);
    Value imaxV = from_batch(ib, imax, V);
    Value ri = row(ib, d, A, imax), ci = column(ib, d, A, imax);
    Value rowmax1 = iamax(ib, d, ri, land(ib, ge(ib, vi, kV), lt(ib, vi, imaxV)), k).first;
    Value rowmax2 = iamax(ib, d, ci, gt(ib, vi, imaxV), k).first;
    Value rowmax = ib.max(rowmax1, rowmax2);
    Value alph = ib.constant(alpha, bt);
    Value zero_b = zeros(ib, bt);
    Value singular = lor(ib, eq(ib, ib.max(absakk, colmax), zero_b),
                         ib.compare(absakk, absakk, CompareDirection::kNE));
    Value acol = ib.mul(alph, colmax);
    Value c1 = ge(ib, absakk, acol);
    Value c2 = ge(ib, absakk, ib.mul(acol, ib.div(colmax, rowmax)));
    Value c3 = ge(ib, absv(ib, at(ib, d, ci, imax)), ib.mul(alph, rowmax));
    Value nopiv = lor(ib, singular, lor(ib, c1, c2));
    Value two = land(ib, lnot(ib, nopiv), lnot(ib, c3));
    Value kp = ib.select(nopiv, k, imax);
    Value kk = ib.select(two, plus(ib, k, 1), k);

    // Symmetric interchange of kk and kp within A(k:n, k:n) (lower triangle).
    Value lowtri = ge(ib, rows, cols);
    Value full = ib.select(lowtri, A, ib.transpose(A, [&] {
      std::vector<int64_t> p = first_n(r);
      std::swap(p[r - 1], p[r - 2]);
      return p;
    }()));
    Value perm = swap_cols(ib, d, swap_rows(ib, d, full, kk, kp), kk, kp);
    Value activeS = from_batch(ib, active, S);
    Value trail = land(ib, land(ib, lowtri, activeS), land(ib, ge(ib, rows, kS), ge(ib, cols, kS)));
    A = ib.select(trail, perm, A);

    // Updates.
    Value doupd = from_batch(ib, land(ib, active, lnot(ib, singular)), S);
    Value twoS = from_batch(ib, two, S);
    ck = column(ib, d, A, k);
    Value k1 = plus(ib, k, 1);
    Value ck1 = column(ib, d, A, k1);
    Value akk = at(ib, d, ck, k);
    Value one_b = ib.constant(1, bt);
    // 1x1: A(k+1:n, k+1:n) += x * (-d11 * x)^T (dsyr), then x *= d11.
    Value d11 = ib.div(one_b, akk);
    Value tmp = ib.mul(from_batch(ib, ib.unary("stablehlo.negate", d11), V), ck);
    Value upd1 = ib.add(A, ib.mul(expand(ib, ck, S, r - 1), expand(ib, tmp, S, r - 2)));
    Value newk1 = ib.mul(ck, from_batch(ib, d11, V));
    // 2x2.
    Value d21 = at(ib, d, ck, k1);
    Value d11b = ib.div(at(ib, d, ck1, k1), d21);
    Value d22 = ib.div(akk, d21);
    Value t = ib.div(one_b, ib.sub(ib.mul(d11b, d22), one_b));
    Value d21b = ib.div(t, d21);
    Value d21V = from_batch(ib, d21b, V);
    Value wk = ib.mul(d21V, ib.sub(ib.mul(from_batch(ib, d11b, V), ck), ck1));
    Value wkp1 = ib.mul(d21V, ib.sub(ib.mul(from_batch(ib, d22, V), ck1), ck));
    Value upd2 = ib.sub(ib.sub(A, ib.mul(expand(ib, ck, S, r - 1), expand(ib, wk, S, r - 2))),
                        ib.mul(expand(ib, ck1, S, r - 1), expand(ib, wkp1, S, r - 2)));

    Value gtk_r = gt(ib, rows, kS), gtk_c = gt(ib, cols, kS);
    Value k2S = from_batch(ib, plus(ib, k, 2), S);
    Value ge2_r = ge(ib, rows, k2S), ge2_c = ge(ib, cols, k2S);
    Value one = land(ib, doupd, lnot(ib, twoS));
    Value dbl = land(ib, doupd, twoS);
    Value m1 = land(ib, one, land(ib, lowtri, land(ib, gtk_r, gtk_c)));
    Value m1c = land(ib, one, land(ib, eq(ib, cols, kS), gtk_r));
    Value m2 = land(ib, dbl, land(ib, lowtri, land(ib, ge2_r, ge2_c)));
    Value m2c0 = land(ib, dbl, land(ib, eq(ib, cols, kS), ge2_r));
    Value m2c1 = land(ib, dbl, land(ib, eq(ib, cols, from_batch(ib, k1, S)), ge2_r));
    A = ib.select(m1, upd1, A);
    A = ib.select(m1c, expand(ib, newk1, S, r - 1), A);
    A = ib.select(m2, upd2, A);
    A = ib.select(m2c0, expand(ib, wk, S, r - 1), A);
    A = ib.select(m2c1, expand(ib, wkp1, S, r - 1), A);

    // Pivots (1-based, negative for 2x2 blocks) and info.
    TensorType pt = piv.type;
    Value pidx = ib.iota(TensorType(ElementType::kS64, pt.shape), static_cast<int64_t>(r - 2));
    Value kp1 = ib.convert(plus(ib, kp, 1), ElementType::kS32);
    Value pval = ib.select(two, ib.unary("stablehlo.negate", kp1), kp1);
    Value pvalV = from_batch(ib, pval, pt.shape);
    Value activeV = from_batch(ib, active, pt.shape);
    Value atk = land(ib, activeV, eq(ib, pidx, kV));
    Value atk1 =
        land(ib, land(ib, activeV, from_batch(ib, two, pt.shape)), eq(ib, pidx, plus(ib, kV, 1)));
    piv = ib.select(lor(ib, atk, atk1), pvalV, piv);
    Value first = land(ib, land(ib, active, singular), eq(ib, info, zeros(ib, info.type)));
    info = ib.select(first, ib.convert(plus(ib, k, 1), ElementType::kS32), info);
    Value knext = ib.select(active, ib.select(two, plus(ib, k, 2), k1), k);
    return {plus(ib, it, 1), knext, A, piv, info};
  };
  std::vector<Value> res = b.while_loop(init, cond, body);
  return {res[2], res[3], res[4]};
}

// ?sytrs, uplo='L': solves A X = B from (LD, pivots).
Value sytrs_lower(FunctionBuilder& b, Value ld, Value piv, Value rhs) {
  Dims d;
  d.mat = rhs.shape();
  d.r = d.mat.size();
  d.n = ld.shape().back();
  d.batch = Shape(d.mat.begin(), d.mat.end() - 2);
  d.vec = Shape(d.mat.begin(), d.mat.end() - 1);
  const int64_t n = d.n;
  const size_t r = d.r;
  TensorType it_t(ElementType::kS64, {});
  TensorType k_t(ElementType::kS64, d.batch);
  auto cond = [n, it_t](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {ib.compare(st[0], ib.constant_int(n, it_t), CompareDirection::kLT)};
  };
  // Forward: L D Y = B.
  auto fwd = [d, n, r](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    Value it = st[0], k = st[1], L = st[2], P = st[3], B = st[4];
    const Shape& S = B.shape();
    TensorType bt(B.dtype(), d.batch);
    Value active = lt(ib, k, ib.constant_int(n, k.type));
    Value kc = ib.select(active, k, ib.constant_int(0, k.type));
    Value pk = ib.convert(at(ib, d, P, kc), ElementType::kS64);
    Value two = lt(ib, pk, ib.constant_int(0, pk.type));
    Value kp = ib.select(two, ib.unary("stablehlo.negate", pk), pk);
    kp = plus(ib, kp, -1);
    Value k1 = plus(ib, k, 1);
    Value sw = ib.select(two, k1, k);
    Value Bs = swap_rows(ib, d, B, sw, kp);
    Value activeS = from_batch(ib, active, S);
    B = ib.select(activeS, Bs, B);
    Value rows = iota_s64(ib, S, r - 2);
    Value ck = column(ib, d, L, k), ck1 = column(ib, d, L, k1);
    Value bk = row(ib, d, B, k), bk1 = row(ib, d, B, k1);
    Value twoS = from_batch(ib, two, S);
    // 1x1.
    Value u1 = ib.sub(B, ib.mul(expand(ib, ck, S, r - 1), expand(ib, bk, S, r - 2)));
    Value akk = at(ib, d, ck, k);
    Value one_b = ib.constant(1, bt);
    Value rk1 = ib.mul(bk, expand(ib, ib.div(one_b, akk), bk.shape(), r - 2));
    // 2x2.
    Value u2 = ib.sub(u1, ib.mul(expand(ib, ck1, S, r - 1), expand(ib, bk1, S, r - 2)));
    Value akm1k = at(ib, d, ck, k1);
    Value akm1 = ib.div(akk, akm1k);
    Value ak = ib.div(at(ib, d, ck1, k1), akm1k);
    Value denom = ib.sub(ib.mul(akm1, ak), one_b);
    const Shape& RV = bk.shape();
    auto rb = [&](Value v) { return expand(ib, v, RV, r - 2); };
    Value bkm1 = ib.div(bk, rb(akm1k)), bkk = ib.div(bk1, rb(akm1k));
    Value r2k = ib.div(ib.sub(ib.mul(rb(ak), bkm1), bkk), rb(denom));
    Value r2k1 = ib.div(ib.sub(ib.mul(rb(akm1), bkk), bkm1), rb(denom));
    Value kS = from_batch(ib, k, S);
    Value k1S = from_batch(ib, k1, S);
    Value one = land(ib, activeS, ib.unary("stablehlo.not", twoS));
    Value dbl = land(ib, activeS, twoS);
    B = ib.select(land(ib, one, gt(ib, rows, kS)), u1, B);
    B = ib.select(land(ib, one, eq(ib, rows, kS)), expand(ib, rk1, S, r - 2), B);
    B = ib.select(land(ib, dbl, gt(ib, rows, k1S)), u2, B);
    B = ib.select(land(ib, dbl, eq(ib, rows, kS)), expand(ib, r2k, S, r - 2), B);
    B = ib.select(land(ib, dbl, eq(ib, rows, k1S)), expand(ib, r2k1, S, r - 2), B);
    Value knext = ib.select(active, ib.select(two, plus(ib, k, 2), k1), k);
    return {plus(ib, it, 1), knext, L, P, B};
  };
  std::vector<Value> init = {b.constant_int(0, it_t), b.constant_int(0, k_t), ld, piv, rhs};
  Value y = b.while_loop(init, cond, fwd)[4];

  // Backward: L^T X = Y.
  auto bwd = [d, r](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    Value it = st[0], k = st[1], L = st[2], P = st[3], B = st[4];
    const Shape& S = B.shape();
    Value active = ge(ib, k, ib.constant_int(0, k.type));
    Value kc = ib.select(active, k, ib.constant_int(0, k.type));
    Value pk = ib.convert(at(ib, d, P, kc), ElementType::kS64);
    Value two = lt(ib, pk, ib.constant_int(0, pk.type));
    Value kp = plus(ib, ib.select(two, ib.unary("stablehlo.negate", pk), pk), -1);
    Value km1 = plus(ib, k, -1);
    Value rows = iota_s64(ib, S, r - 2);
    Value kS = from_batch(ib, k, S);
    Value below = gt(ib, rows, kS);
    Value Bb = ib.select(below, B, zeros(ib, B.type));
    Value ck = column(ib, d, L, k), ckm1 = column(ib, d, L, km1);
    Value s0 = sum_dim(ib, ib.mul(Bb, expand(ib, ck, S, r - 1)), r - 2);
    Value s1 = sum_dim(ib, ib.mul(Bb, expand(ib, ckm1, S, r - 1)), r - 2);
    Value activeS = from_batch(ib, active, S);
    Value twoS = from_batch(ib, two, S);
    Value rk = ib.sub(row(ib, d, B, k), s0);
    Value rkm1 = ib.sub(row(ib, d, B, km1), s1);
    B = ib.select(land(ib, activeS, eq(ib, rows, kS)), expand(ib, rk, S, r - 2), B);
    B = ib.select(land(ib, land(ib, activeS, twoS), eq(ib, rows, from_batch(ib, km1, S))),
                  expand(ib, rkm1, S, r - 2), B);
    B = ib.select(activeS, swap_rows(ib, d, B, kc, kp), B);
    Value knext = ib.select(active, ib.select(two, plus(ib, k, -2), km1), k);
    return {plus(ib, it, 1), knext, L, P, B};
  };
  std::vector<Value> init2 = {b.constant_int(0, it_t), b.constant_int(n - 1, k_t), ld, piv, y};
  return b.while_loop(init2, cond, bwd)[4];
}

void check_real(const LoweringContext& ctx, ElementType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(t == ElementType::kF32 || t == ElementType::kF64,
                              "torchtpu lowering: ", ctx.schema().name(),
                              " is lowered for float32/float64 only");
}

// linalg_ldl_factor_ex(Tensor self, *, bool hermitian=False, bool check_errors=False)
//   -> (LD, pivots, info)
std::vector<Value> lower_ldl_factor_ex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.out_type(0).dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(
      !ctx.bool_arg(ctx.index_of("check_errors")),
      "torchtpu: linalg_ldl_factor_ex(check_errors=True) raises on the host");
  Value a = coerce(b, ctx.tensor(0), ctx.out_type(0));
  LDL f = sytf2_lower(b, a, ctx.out_type(1), ctx.out_type(2));
  return {f.ld, f.pivots, f.info};
}

// linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor
std::vector<Value> lower_ldl_solve(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  Shape batch(out.shape.begin(), out.shape.end() - 2);
  Value ld = ctx.tensor(0);
  int64_t n = ld.shape().back();
  Shape ls = batch, ps = batch;
  ls.push_back(n);
  ls.push_back(n);
  ps.push_back(n);
  Value ldv = coerce(b, ld, TensorType(out.dtype, ls));
  Value pv = coerce(b, ctx.tensor(1), TensorType(ElementType::kS32, ps));
  Value rhs = coerce(b, ctx.tensor(2), out);
  return {sytrs_lower(b, ldv, pv, rhs)};
}

}  // namespace

TORCHTPU_LOWERING("aten::linalg_ldl_factor_ex", lower_ldl_factor_ex);
TORCHTPU_LOWERING("aten::linalg_ldl_solve", lower_ldl_solve);

}  // namespace torchtpu::lowering
