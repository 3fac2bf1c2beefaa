// Matrix decompositions and solves for real dtypes: triangular solves and Cholesky on
// stablehlo.triangular_solve / stablehlo.cholesky, and LU with partial pivoting (LAPACK getrf
// semantics: 1-based sequential row swaps in `pivots`, `info` = first zero pivot) as a
// stablehlo.while over the columns, from which lu_unpack, lu_solve, inv, det, slogdet and
// solve follow. Batch dims broadcast as the meta kernels report in out_types.
//
// `check_errors=True` needs a host-side raise on singular/non-PD input: those calls stay on the
// CPU (NotImplementedError -> fallback); PyTorch's own linalg.inv/cholesky/solve pass
// check_errors=False and check `info` themselves.
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

using Shape = std::vector<int64_t>;

Shape drop(const Shape& s, size_t d) {
  Shape r = s;
  r.erase(r.begin() + static_cast<std::ptrdiff_t>(d));
  return r;
}

Shape with_last2(Shape batch, int64_t m, int64_t n) {
  batch.push_back(m);
  batch.push_back(n);
  return batch;
}

Shape batch_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

std::vector<int64_t> all_but(size_t rank, size_t d) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < rank; ++i)
    if (i != d) dims.push_back(static_cast<int64_t>(i));
  return dims;
}

std::vector<int64_t> first_n(size_t n) {
  std::vector<int64_t> dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  return dims;
}

// v (shape `full` without dim d) broadcast along d.
Value expand(FunctionBuilder& b, Value v, const Shape& full, size_t d) {
  return b.broadcast_in_dim(v, full, all_but(full.size(), d));
}

// A 0-d value broadcast to `shape`.
Value splat(FunctionBuilder& b, Value s, const Shape& shape) {
  return b.broadcast_in_dim(s, shape, {});
}

// A value of shape batch broadcast to `shape` (batch dims leading).
Value from_batch(FunctionBuilder& b, Value v, const Shape& shape) {
  return b.broadcast_in_dim(v, shape, first_n(static_cast<size_t>(v.rank())));
}

Value reduce_dim(FunctionBuilder& b, Value v, size_t d, const char* op, double init) {
  return b.reduce_simple(v, b.constant(init, TensorType(v.dtype(), {})), {static_cast<int64_t>(d)},
                         op);
}

Value sum_dim(FunctionBuilder& b, Value v, size_t d) {
  return reduce_dim(b, v, d, "stablehlo.add", 0);
}

Value iota_s64(FunctionBuilder& b, const Shape& shape, size_t d) {
  return b.iota(TensorType(ElementType::kS64, shape), static_cast<int64_t>(d));
}

Value eq(FunctionBuilder& b, Value x, Value y) { return b.compare(x, y, CompareDirection::kEQ); }

Value transpose_last2(FunctionBuilder& b, Value v) {
  std::vector<int64_t> perm = first_n(static_cast<size_t>(v.rank()));
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return b.transpose(v, perm);
}

// Keeps the lower (lower=true) or upper triangle from diagonal offset `diag` on.
Value triangle(FunctionBuilder& b, Value v, bool lower, int64_t diag = 0) {
  size_t r = static_cast<size_t>(v.rank());
  Value rows = iota_s64(b, v.shape(), r - 2), cols = iota_s64(b, v.shape(), r - 1);
  Value off = b.add(rows, b.constant_int(diag, rows.type));
  Value keep = lower ? b.compare(cols, off, CompareDirection::kLE)
                     : b.compare(cols, off, CompareDirection::kGE);
  return b.select(keep, v, zeros(b, v.type));
}

Value eye(FunctionBuilder& b, const TensorType& t) {
  size_t r = static_cast<size_t>(t.rank());
  Value rows = iota_s64(b, t.shape, r - 2), cols = iota_s64(b, t.shape, r - 1);
  return b.convert(eq(b, rows, cols), t.dtype);
}

// Solves op(a) x = rhs (left) or x op(a) = rhs; a and rhs share their batch dims.
Value tri_solve(FunctionBuilder& b, Value a, Value rhs, bool left, bool lower, bool unit,
                bool transpose) {
  return shlo::triangular_solve(b, a, rhs, {left, lower, unit, transpose});
}

// PyTorch factors A^T when A is contiguous (det, slogdet; not solve) and its backward formulas
// read the saved LU accordingly, so the lowering must do the same. Compiled graphs carry no
// tensor here: their inputs are contiguous intermediates.
bool contiguous_arg(const LoweringContext& ctx, size_t i) {
  const c10::IValue& iv = ctx.arg(i).ivalue;
  return !iv.isTensor() || iv.toTensor().is_contiguous();
}

void check_real(const LoweringContext& ctx, ElementType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(shlo::is_float(t), "torchtpu lowering: ", ctx.schema().name(),
                              " is lowered for real floating point dtypes only");
}

// ---- triangular solves ----

std::vector<Value> lower_linalg_solve_triangular(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  bool upper = ctx.bool_arg(ctx.index_of("upper"));
  bool left = ctx.bool_arg(ctx.index_of("left"));
  bool unit = ctx.bool_arg(ctx.index_of("unitriangular"));
  Value a = ctx.tensor(0);
  int64_t n = a.shape().back();
  Value av = coerce(b, a, TensorType(out.dtype, with_last2(batch_of(out.shape), n, n)));
  Value rhs = coerce(b, ctx.tensor(1), out);
  return {tri_solve(b, av, rhs, left, !upper, unit, false)};
}

// triangular_solve(b, A, upper, transpose, unitriangular) -> (solution, cloned A)
std::vector<Value> lower_triangular_solve(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type(0);
  check_real(ctx, out.dtype);
  bool upper = ctx.bool_arg(2), transpose = ctx.bool_arg(3), unit = ctx.bool_arg(4);
  Value av = coerce(b, ctx.tensor(1), ctx.out_type(1));
  Value rhs = coerce(b, ctx.tensor(0), out);
  return {tri_solve(b, av, rhs, true, !upper, unit, transpose), av};
}

// ---- Cholesky ----

// Per batch element: whether the lower factor `l` of XLA's cholesky has a pivot that is not
// positive (or NaN).
Value factor_failed(FunctionBuilder& b, Value l) {
  size_t r = static_cast<size_t>(l.rank());
  Value rows = iota_s64(b, l.shape(), r - 2), cols = iota_s64(b, l.shape(), r - 1);
  Value diag = sum_dim(b, b.select(eq(b, rows, cols), l, zeros(b, l.type)), r - 1);
  Value bad = b.unary("stablehlo.not", b.compare(diag, zeros(b, diag.type), CompareDirection::kGT));
  return b.reduce_simple(bad, b.constant(0, TensorType(ElementType::kPred, {})),
                         {static_cast<int64_t>(r) - 2}, "stablehlo.or");
}

// LAPACK's info: the order of the first leading minor of `a` that is not positive-definite, per
// batch element where `failed`, else 0. XLA's cholesky leaves the whole factor NaN on failure,
// so the order is found by bisection: a's leading k x k block padded with the identity factors
// iff that minor is positive-definite, which holds for every k below the first failure. A while
// loop that makes no trip when nothing failed.
Value first_failing_minor(FunctionBuilder& b, Value a, Value failed) {
  const Shape& shape = a.shape();
  size_t r = shape.size();
  int64_t n = shape.back();
  TensorType bt(ElementType::kS64, batch_of(shape));
  Value lo = b.constant_int(0, bt);
  Value hi = b.select(failed, b.constant_int(n, bt), b.constant_int(1, bt));
  auto active = [](FunctionBuilder& fb, Value l, Value h) {
    return fb.compare(fb.sub(h, l), fb.constant_int(1, h.type), CompareDirection::kGT);
  };
  auto any = [](FunctionBuilder& fb, Value p) {
    if (p.rank() == 0) return p;
    return fb.reduce_simple(p, fb.constant(0, TensorType(ElementType::kPred, {})),
                            first_n(static_cast<size_t>(p.rank())), "stablehlo.or");
  };
  std::vector<Value> st = b.while_loop(
      {a, lo, hi},
      [&](FunctionBuilder& fb, const std::vector<Value>& v) -> std::vector<Value> {
        return {any(fb, active(fb, v[1], v[2]))};
      },
      [&](FunctionBuilder& fb, const std::vector<Value>& v) -> std::vector<Value> {
        Value m = v[0], l = v[1], h = v[2];
        Value mid = fb.div(fb.add(l, h), fb.constant_int(2, l.type));
        Value rows = iota_s64(fb, shape, r - 2), cols = iota_s64(fb, shape, r - 1);
        Value k = from_batch(fb, mid, shape);
        Value inside = land(fb, fb.compare(rows, k, CompareDirection::kLT),
                            fb.compare(cols, k, CompareDirection::kLT));
        Value eye_m = fb.convert(eq(fb, rows, cols), m.dtype());
        Value padded = fb.select(inside, m, eye_m);
        Value pd = lnot(fb, factor_failed(fb, shlo::cholesky(fb, padded, true)));
        Value act = active(fb, l, h);
        Value up = land(fb, act, pd);
        Value down = land(fb, act, fb.unary("stablehlo.not", pd));
        return {m, fb.select(up, mid, l), fb.select(down, mid, h)};
      });
  return b.select(failed, st[2], zeros(b, bt));
}

// Lower factor, upper triangle zeroed; info = the order of the first leading minor that is not
// positive-definite, else 0 (LAPACK potrf's info, as the CPU reports it).
std::pair<Value, Value> cholesky(FunctionBuilder& b, Value a, const TensorType& info_type) {
  Value l = shlo::cholesky(b, a, true);
  l = triangle(b, l, true);
  Value info = first_failing_minor(b, a, factor_failed(b, l));
  return {l, coerce(b, info, info_type)};
}

std::vector<Value> lower_linalg_cholesky_ex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.out_type(0).dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(!ctx.bool_arg(ctx.index_of("check_errors")),
                              "torchtpu: linalg_cholesky_ex(check_errors=True) raises on the host");
  bool upper = ctx.bool_arg(ctx.index_of("upper"));
  Value a = coerce(b, ctx.tensor(0), ctx.out_type(0));
  auto [l, info] = cholesky(b, a, ctx.out_type(1));
  return {upper ? transpose_last2(b, l) : l, info};
}

std::vector<Value> lower_cholesky(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.out_type().dtype);
  bool upper = ctx.bool_arg(1);
  Value a = coerce(b, ctx.tensor(0), ctx.out_type());
  Shape ishape = batch_of(a.shape());
  Value l = cholesky(b, a, TensorType(ElementType::kS32, ishape)).first;
  return {upper ? transpose_last2(b, l) : l};
}

// A = L L^T (or U^T U): x = L^-T L^-1 rhs.
Value cholesky_solve(FunctionBuilder& b, Value factor, Value rhs, bool upper) {
  if (upper) {
    Value y = tri_solve(b, factor, rhs, true, false, false, true);
    return tri_solve(b, factor, y, true, false, false, false);
  }
  Value y = tri_solve(b, factor, rhs, true, true, false, false);
  return tri_solve(b, factor, y, true, true, false, true);
}

std::vector<Value> lower_cholesky_solve_helper(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  Value a = ctx.tensor(1);
  int64_t n = a.shape().back();
  Value av = coerce(b, a, TensorType(out.dtype, with_last2(batch_of(out.shape), n, n)));
  Value rhs = coerce(b, ctx.tensor(0), out);
  // upper=true: A = U^T U, U stored upper, so the "lower" solves use U^T.
  bool upper = ctx.bool_arg(2);
  if (upper) {
    Value y = tri_solve(b, av, rhs, true, false, false, true);
    return {tri_solve(b, av, y, true, false, false, false)};
  }
  return {cholesky_solve(b, av, rhs, false)};
}

std::vector<Value> lower_cholesky_inverse(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  Value f = coerce(b, ctx.tensor(0), out);
  bool upper = ctx.bool_arg(1);
  Value x = upper ? [&] {
    Value y = tri_solve(b, f, eye(b, out), true, false, false, true);
    return tri_solve(b, f, y, true, false, false, false);
  }()
                  : cholesky_solve(b, f, eye(b, out), false);
  return {x};
}

// ---- LU with partial pivoting ----

struct LU {
  Value lu;      // batch x m x n
  Value pivots;  // batch x min(m, n), s32, 1-based
  Value info;    // batch, s32
};

LU lu_factor(FunctionBuilder& b, Value a, bool pivot) {
  const Shape shape = a.shape();
  const size_t r = shape.size();
  const int64_t m = shape[r - 2], n = shape[r - 1], kmax = std::min(m, n);
  const Shape batch = batch_of(shape);
  Shape piv_shape = batch;
  piv_shape.push_back(kmax);
  TensorType piv_t(ElementType::kS32, piv_shape), info_t(ElementType::kS32, batch);
  TensorType k_t(ElementType::kS64, {});
  std::vector<Value> init = {b.constant_int(0, k_t), a, b.constant_int(0, piv_t),
                             b.constant_int(0, info_t)};
  auto cond = [kmax, k_t](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {ib.compare(st[0], ib.constant_int(kmax, k_t), CompareDirection::kLT)};
  };
  auto body = [=](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    Value k = st[0], A = st[1], piv = st[2], info = st[3];
    Value rows = iota_s64(ib, shape, r - 2), cols = iota_s64(ib, shape, r - 1);
    Value kb = splat(ib, k, shape);
    Value zero = zeros(ib, A.type);
    Value colmask = eq(ib, cols, kb);
    const Shape mshape = drop(shape, r - 1), nshape = drop(shape, r - 2);
    Value colk = sum_dim(ib, ib.select(colmask, A, zero), r - 1);
    Value rowvec = iota_s64(ib, mshape, r - 2);
    Value kbm = splat(ib, k, mshape);
    Value p;
    if (pivot) {
      Value cand = ib.compare(rowvec, kbm, CompareDirection::kGE);
      Value masked = ib.select(cand, ib.unary("stablehlo.abs", colk), ib.constant(-1, colk.type));
      Value mx = reduce_dim(ib, masked, r - 2, "stablehlo.maximum", -1);
      Value hit = land(ib, cand, eq(ib, masked, from_batch(ib, mx, mshape)));
      p = reduce_dim(ib, ib.select(hit, rowvec, ib.constant_int(m, rowvec.type)), r - 2,
                     "stablehlo.minimum", static_cast<double>(m));
      Value kbatch = splat(ib, k, batch);
      p = ib.select(eq(ib, p, ib.constant_int(m, p.type)), kbatch, p);
    } else {
      p = splat(ib, k, batch);
    }
    Value pb = from_batch(ib, p, shape);
    Value rowk = sum_dim(ib, ib.select(eq(ib, rows, kb), A, zero), r - 2);
    Value rowp = sum_dim(ib, ib.select(eq(ib, rows, pb), A, zero), r - 2);
    A = ib.select(eq(ib, rows, kb), expand(ib, rowp, shape, r - 2),
                  ib.select(eq(ib, rows, pb), expand(ib, rowk, shape, r - 2), A));
    Value colvec = iota_s64(ib, nshape, r - 2);
    Value d = sum_dim(
        ib, ib.select(eq(ib, colvec, splat(ib, k, nshape)), rowp, zeros(ib, rowp.type)), r - 2);
    Value colk2 = sum_dim(ib, ib.select(colmask, A, zero), r - 1);
    Value dz = eq(ib, d, zeros(ib, d.type));
    Value l =
        ib.select(from_batch(ib, dz, mshape), colk2, ib.div(colk2, from_batch(ib, d, mshape)));
    Value below = ib.compare(rows, kb, CompareDirection::kGT);
    Value right = ib.compare(cols, kb, CompareDirection::kGT);
    Value lb = expand(ib, l, shape, r - 1);
    Value upd = ib.sub(A, ib.mul(lb, expand(ib, rowp, shape, r - 2)));
    A = ib.select(land(ib, below, right), upd, A);
    A = ib.select(land(ib, below, colmask), lb, A);
    Value pividx = ib.iota(TensorType(ElementType::kS64, piv.shape()), static_cast<int64_t>(r - 2));
    Value p1 = ib.convert(ib.add(p, ib.constant_int(1, p.type)), ElementType::kS32);
    piv =
        ib.select(eq(ib, pividx, splat(ib, k, piv.shape())), from_batch(ib, p1, piv.shape()), piv);
    Value k1 =
        ib.convert(splat(ib, ib.add(k, ib.constant_int(1, k.type)), batch), ElementType::kS32);
    Value first = land(ib, dz, eq(ib, info, zeros(ib, info.type)));
    info = ib.select(first, k1, info);
    return {ib.add(k, ib.constant_int(1, k.type)), A, piv, info};
  };
  std::vector<Value> res = b.while_loop(init, cond, body);
  return {res[1], res[2], res[3]};
}

// The row permutation the sequential swaps in `pivots` apply: perm[i] = the original row that
// ends up in row i (P^T A = L U with (P^T A)[i] = A[perm[i]]). Shape batch x m, s64.
Value permutation(FunctionBuilder& b, Value pivots, int64_t m) {
  Shape pshape = pivots.shape();
  const int64_t kmax = pshape.back();
  Shape bshape(pshape.begin(), pshape.end() - 1);
  Shape mshape = bshape;
  mshape.push_back(m);
  size_t last = mshape.size() - 1;
  TensorType k_t(ElementType::kS64, {});
  Value perm0 = iota_s64(b, mshape, last);
  Value piv = b.convert(pivots, ElementType::kS64);
  std::vector<Value> init = {b.constant_int(0, k_t), perm0, piv};
  auto cond = [kmax, k_t](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {ib.compare(st[0], ib.constant_int(kmax, k_t), CompareDirection::kLT)};
  };
  auto body = [=](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    Value i = st[0], perm = st[1], pv = st[2];
    Value pidx = iota_s64(ib, pshape, last);
    Value pi =
        sum_dim(ib, ib.select(eq(ib, pidx, splat(ib, i, pshape)), pv, zeros(ib, pv.type)), last);
    pi = ib.sub(pi, ib.constant_int(1, pi.type));
    Value idx = iota_s64(ib, mshape, last);
    Value at_i = eq(ib, idx, splat(ib, i, mshape));
    Value at_p = eq(ib, idx, from_batch(ib, pi, mshape));
    Value zero = zeros(ib, perm.type);
    Value vi = sum_dim(ib, ib.select(at_i, perm, zero), last);
    Value vp = sum_dim(ib, ib.select(at_p, perm, zero), last);
    perm = ib.select(at_i, from_batch(ib, vp, mshape),
                     ib.select(at_p, from_batch(ib, vi, mshape), perm));
    return {ib.add(i, ib.constant_int(1, i.type)), perm, pv};
  };
  return b.while_loop(init, cond, body)[1];
}

// P^T x (rows of x gathered by perm) when `transpose`, else P x; x is batch x m x k.
Value apply_perm(FunctionBuilder& b, Value perm, Value x, bool transpose) {
  const Shape& xs = x.shape();
  size_t r = xs.size();
  int64_t m = xs[r - 2];
  Shape pshape = with_last2(batch_of(xs), m, m);
  Value rows = iota_s64(b, pshape, r - 2), cols = iota_s64(b, pshape, r - 1);
  // Pt[i, j] = perm[i] == j; P[i, j] = perm[j] == i.
  Value mat = transpose ? eq(b, expand(b, perm, pshape, r - 1), cols)
                        : eq(b, expand(b, perm, pshape, r - 2), rows);
  Value pm = b.convert(mat, x.dtype());
  std::vector<int64_t> bd = first_n(r - 2);
  return b.dot_general(pm, x, bd, bd, {static_cast<int64_t>(r - 1)}, {static_cast<int64_t>(r - 2)},
                       x.type);
}

// Solves A x = rhs (adjoint: A^T x = rhs) from A's LU factors; shapes share batch dims.
Value lu_solve_left(FunctionBuilder& b, Value lu, Value perm, Value rhs, bool adjoint) {
  if (!adjoint) {
    Value y = apply_perm(b, perm, rhs, true);
    y = tri_solve(b, lu, y, true, true, true, false);
    return tri_solve(b, lu, y, true, false, false, false);
  }
  Value y = tri_solve(b, lu, rhs, true, false, false, true);
  y = tri_solve(b, lu, y, true, true, true, true);
  return apply_perm(b, perm, y, false);
}

Value lu_solve(FunctionBuilder& b, Value lu, Value perm, Value rhs, bool left, bool adjoint) {
  if (left) return lu_solve_left(b, lu, perm, rhs, adjoint);
  // x A = rhs  <=>  A^T x^T = rhs^T
  return transpose_last2(b, lu_solve_left(b, lu, perm, transpose_last2(b, rhs), !adjoint));
}

std::vector<Value> lower_lu_factor_ex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.out_type(0).dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(
      !ctx.bool_arg(ctx.index_of("check_errors")),
      "torchtpu: linalg_lu_factor_ex(check_errors=True) raises on the host");
  bool pivot = ctx.bool_arg(ctx.index_of("pivot"));
  LU f = lu_factor(b, coerce(b, ctx.tensor(0), ctx.out_type(0)), pivot);
  return {f.lu, coerce(b, f.pivots, ctx.out_type(1)), coerce(b, f.info, ctx.out_type(2))};
}

// P, L, U from packed factors (empty outputs where the meta kernel says so).
std::vector<Value> unpack(LoweringContext& ctx, Value lu, Value pivots, bool data, bool pivs) {
  FunctionBuilder& b = ctx.b;
  const Shape& s = lu.shape();
  size_t r = s.size();
  int64_t m = s[r - 2], n = s[r - 1], k = std::min(m, n);
  Value P = zeros(b, ctx.out_type(0)), L = zeros(b, ctx.out_type(1)), U = zeros(b, ctx.out_type(2));
  if (pivs && ctx.out_type(0).numel() > 0) {
    Value perm = permutation(b, pivots, m);
    Shape pshape = with_last2(batch_of(s), m, m);
    Value rows = iota_s64(b, pshape, r - 2);
    P = coerce(b, eq(b, expand(b, perm, pshape, r - 2), rows), ctx.out_type(0));
  }
  if (data && ctx.out_type(1).numel() > 0) {
    Shape z(r, 0), one(r, 1);
    Shape lim = s;
    lim[r - 1] = k;
    Value l = triangle(b, b.slice(lu, z, lim, one), true, -1);
    l = b.add(l, eye(b, l.type));
    L = coerce(b, l, ctx.out_type(1));
    lim = s;
    lim[r - 2] = k;
    U = coerce(b, triangle(b, b.slice(lu, z, lim, one), false), ctx.out_type(2));
  }
  return {P, L, U};
}

std::vector<Value> lower_lu_unpack(LoweringContext& ctx) {
  check_real(ctx, ctx.tensor(0).dtype());
  return unpack(ctx, ctx.tensor(0), ctx.tensor(1), ctx.bool_arg(2), ctx.bool_arg(3));
}

std::vector<Value> lower_linalg_lu(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.tensor(0).dtype());
  bool pivot = ctx.bool_arg(ctx.index_of("pivot"));
  LU f = lu_factor(b, ctx.tensor(0), pivot);
  return unpack(ctx, f.lu, f.pivots, true, pivot);
}

std::vector<Value> lower_linalg_lu_solve(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  bool left = ctx.bool_arg(ctx.index_of("left")), adjoint = ctx.bool_arg(ctx.index_of("adjoint"));
  Value lu = ctx.tensor(0);
  int64_t n = lu.shape().back();
  Shape batch = batch_of(out.shape);
  Value luv = coerce(b, lu, TensorType(out.dtype, with_last2(batch, n, n)));
  Shape pb = batch;
  pb.push_back(n);
  Value piv = coerce(b, ctx.tensor(1), TensorType(ElementType::kS32, pb));
  Value perm = permutation(b, piv, n);
  return {lu_solve(b, luv, perm, coerce(b, ctx.tensor(2), out), left, adjoint)};
}

std::vector<Value> lower_linalg_inv_ex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type(0);
  check_real(ctx, out.dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(!ctx.bool_arg(ctx.index_of("check_errors")),
                              "torchtpu: linalg_inv_ex(check_errors=True) raises on the host");
  LU f = lu_factor(b, coerce(b, ctx.tensor(0), out), true);
  Value perm = permutation(b, f.pivots, out.shape.back());
  return {lu_solve(b, f.lu, perm, eye(b, out), true, false), coerce(b, f.info, ctx.out_type(1))};
}

// Product of U's diagonal and the permutation's sign (-1 per actual swap).
std::pair<Value, Value> diag_and_sign(FunctionBuilder& b, const LU& f) {
  const Shape& s = f.lu.shape();
  size_t r = s.size();
  Value rows = iota_s64(b, s, r - 2), cols = iota_s64(b, s, r - 1);
  Value diag = sum_dim(b, b.select(eq(b, rows, cols), f.lu, zeros(b, f.lu.type)), r - 1);
  Value idx =
      b.add(b.iota(f.pivots.type, static_cast<int64_t>(r - 2)), b.constant_int(1, f.pivots.type));
  Value swapped = b.convert(b.compare(idx, f.pivots, CompareDirection::kNE), ElementType::kS32);
  Value nswaps = sum_dim(b, swapped, r - 2);
  Value odd = eq(b, b.binary("stablehlo.and", nswaps, b.constant_int(1, nswaps.type)),
                 b.constant_int(1, nswaps.type));
  Value sign = b.select(odd, b.constant(-1, TensorType(f.lu.dtype(), nswaps.shape())),
                        b.constant(1, TensorType(f.lu.dtype(), nswaps.shape())));
  return {diag, sign};
}

std::vector<Value> lower_linalg_det(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.out_type(0).dtype);
  Value a = coerce(b, ctx.tensor(0), ctx.out_type(1));
  LU f = lu_factor(b, contiguous_arg(ctx, 0) ? transpose_last2(b, a) : a, true);
  auto [diag, sign] = diag_and_sign(b, f);
  size_t r = static_cast<size_t>(f.lu.rank());
  Value det = b.mul(sign, reduce_dim(b, diag, r - 2, "stablehlo.multiply", 1));
  return {coerce(b, det, ctx.out_type(0)), f.lu, coerce(b, f.pivots, ctx.out_type(2))};
}

std::vector<Value> lower_linalg_slogdet(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  check_real(ctx, ctx.out_type(0).dtype);
  Value a = coerce(b, ctx.tensor(0), ctx.out_type(2));
  LU f = lu_factor(b, contiguous_arg(ctx, 0) ? transpose_last2(b, a) : a, true);
  auto [diag, sign] = diag_and_sign(b, f);
  size_t r = static_cast<size_t>(f.lu.rank());
  Value neg =
      b.convert(b.compare(diag, zeros(b, diag.type), CompareDirection::kLT), ElementType::kS32);
  Value nneg = sum_dim(b, neg, r - 2);
  Value odd = eq(b, b.binary("stablehlo.and", nneg, b.constant_int(1, nneg.type)),
                 b.constant_int(1, nneg.type));
  sign = b.select(odd, b.neg(sign), sign);
  Value logabs = sum_dim(b, b.unary("stablehlo.log", b.unary("stablehlo.abs", diag)), r - 2);
  Value anyzero = reduce_dim(b, b.convert(eq(b, diag, zeros(b, diag.type)), ElementType::kS32),
                             r - 2, "stablehlo.maximum", 0);
  sign = b.select(eq(b, anyzero, b.constant_int(1, anyzero.type)), zeros(b, sign.type), sign);
  return {coerce(b, sign, ctx.out_type(0)), coerce(b, logabs, ctx.out_type(1)), f.lu,
          coerce(b, f.pivots, ctx.out_type(3))};
}

// _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info)
std::vector<Value> lower_linalg_solve_ex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type(0);
  check_real(ctx, out.dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(!ctx.bool_arg(ctx.index_of("check_errors")),
                              "torchtpu: _linalg_solve_ex(check_errors=True) raises on the host");
  bool left = ctx.bool_arg(ctx.index_of("left"));
  const TensorType& lu_t = ctx.out_type(1);
  Value a = coerce(b, ctx.tensor(0), lu_t);
  LU f = lu_factor(b, a, true);
  int64_t n = lu_t.shape.back();
  Value perm = permutation(b, f.pivots, n);
  Value rhs = ctx.tensor(1);
  // Vector right-hand side: B has one dim less than A (after batching) and out matches it.
  bool vector_case = out.rank() == lu_t.rank() - 1;
  Shape batch = batch_of(lu_t.shape);
  TensorType rhs_t = out;
  if (vector_case) rhs_t = TensorType(out.dtype, with_last2(batch, n, 1));
  Value rv = vector_case ? coerce(b, b.reshape(coerce(b, rhs, out), rhs_t.shape), rhs_t)
                         : coerce(b, rhs, out);
  Value x = lu_solve(b, f.lu, perm, rv, left, false);
  if (vector_case) x = b.reshape(x, out.shape);
  return {x, f.lu, coerce(b, f.pivots, ctx.out_type(2)), coerce(b, f.info, ctx.out_type(3))};
}

// ---- Householder QR (LAPACK geqrf conventions: R on and above the diagonal, the reflectors'
// vectors below it with an implicit unit head, tau per reflector; dlarfg's sign choice
// beta = -sign(alpha) * ||(alpha, x)||, so Q and R match LAPACK's) ----

// Column i of `v` (batch x m x n) as the full reflector vector: 0 above row i, 1 at row i.
Value reflector(FunctionBuilder& b, Value v, Value i) {
  const Shape& s = v.shape();
  size_t r = s.size();
  Value rows = iota_s64(b, s, r - 2), cols = iota_s64(b, s, r - 1);
  Value ib = splat(b, i, s);
  Value col = sum_dim(b, b.select(eq(b, cols, ib), v, zeros(b, v.type)), r - 1);  // batch x m
  const Shape ms = drop(s, r - 1);
  Value rv = iota_s64(b, ms, r - 2), im = splat(b, i, ms);
  col = b.select(b.compare(rv, im, CompareDirection::kGT), col, zeros(b, col.type));
  return b.select(eq(b, rv, im), b.constant(1, col.type), col);
}

// tau[..., i] as a batch-shaped value.
Value tau_at(FunctionBuilder& b, Value tau, Value i) {
  size_t r = static_cast<size_t>(tau.rank());
  Value idx = iota_s64(b, tau.shape(), r - 1);
  return sum_dim(b, b.select(eq(b, idx, splat(b, i, tau.shape())), tau, zeros(b, tau.type)), r - 1);
}

// c := H c (left) or c H (right) with H = I - tau v v^T; v: batch x m, tau: batch.
Value apply_reflector(FunctionBuilder& b, Value v, Value tau, Value c, bool left) {
  const Shape& s = c.shape();
  size_t r = s.size();
  if (left) {
    // w_j = sum_i v_i c_ij
    Value w = sum_dim(b, b.mul(expand(b, v, s, r - 1), c), r - 2);  // batch x n
    Value tw = b.mul(from_batch(b, tau, w.shape()), w);
    return b.sub(c, b.mul(expand(b, v, s, r - 1), expand(b, tw, s, r - 2)));
  }
  // w_i = sum_j c_ij v_j
  Value w = sum_dim(b, b.mul(c, expand(b, v, s, r - 2)), r - 1);  // batch x m
  Value tw = b.mul(from_batch(b, tau, w.shape()), w);
  return b.sub(c, b.mul(expand(b, tw, s, r - 1), expand(b, v, s, r - 2)));
}

// for i in [lo, hi) ascending (or descending): c = apply(H_i, c). v: batch x m x k.
Value apply_reflectors(FunctionBuilder& b, Value v, Value tau, Value c, bool left, bool ascending) {
  const int64_t k = tau.shape().back();
  TensorType k_t(ElementType::kS64, {});
  std::vector<Value> init = {b.constant_int(ascending ? 0 : k - 1, k_t), v, tau, c};
  auto cond = [k, k_t, ascending](FunctionBuilder& ib,
                                  const std::vector<Value>& st) -> std::vector<Value> {
    if (ascending) return {ib.compare(st[0], ib.constant_int(k, k_t), CompareDirection::kLT)};
    return {ib.compare(st[0], ib.constant_int(0, k_t), CompareDirection::kGE)};
  };
  auto body = [left, ascending](FunctionBuilder& ib,
                                const std::vector<Value>& st) -> std::vector<Value> {
    Value i = st[0];
    Value vi = reflector(ib, st[1], i);
    Value ti = tau_at(ib, st[2], i);
    Value c2 = apply_reflector(ib, vi, ti, st[3], left);
    Value next = ib.add(i, ib.constant_int(ascending ? 1 : -1, i.type));
    return {next, st[1], st[2], c2};
  };
  return b.while_loop(init, cond, body)[3];
}

std::pair<Value, Value> geqrf(FunctionBuilder& b, Value a) {
  const Shape shape = a.shape();
  const size_t r = shape.size();
  const int64_t m = shape[r - 2], n = shape[r - 1], kmax = std::min(m, n);
  Shape tshape = batch_of(shape);
  tshape.push_back(kmax);
  TensorType tau_t(a.dtype(), tshape), k_t(ElementType::kS64, {});
  std::vector<Value> init = {b.constant_int(0, k_t), a, b.constant(0, tau_t)};
  auto cond = [kmax, k_t](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {ib.compare(st[0], ib.constant_int(kmax, k_t), CompareDirection::kLT)};
  };
  auto body = [=](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    Value k = st[0], A = st[1], tau = st[2];
    Value rows = iota_s64(ib, shape, r - 2), cols = iota_s64(ib, shape, r - 1);
    Value kb = splat(ib, k, shape);
    Value zero = zeros(ib, A.type);
    Value colk = sum_dim(ib, ib.select(eq(ib, cols, kb), A, zero), r - 1);  // batch x m
    const Shape ms = drop(shape, r - 1);
    Value rv = iota_s64(ib, ms, r - 2), km = splat(ib, k, ms);
    Value below = ib.compare(rv, km, CompareDirection::kGT);
    Value alpha = sum_dim(ib, ib.select(eq(ib, rv, km), colk, zeros(ib, colk.type)), r - 2);
    Value x = ib.select(below, colk, zeros(ib, colk.type));
    Value xnorm = ib.unary("stablehlo.sqrt", sum_dim(ib, ib.mul(x, x), r - 2));
    Value bz = zeros(ib, xnorm.type);
    Value trivial = eq(ib, xnorm, bz);
    Value norm = ib.unary("stablehlo.sqrt", ib.add(ib.mul(alpha, alpha), ib.mul(xnorm, xnorm)));
    Value beta = ib.select(ib.compare(alpha, bz, CompareDirection::kGE), ib.neg(norm), norm);
    Value t = ib.select(trivial, bz, ib.div(ib.sub(beta, alpha), beta));
    Value scale = ib.div(ib.constant(1, beta.type), ib.sub(alpha, beta));
    scale = ib.select(trivial, bz, scale);
    Value v = ib.mul(x, from_batch(ib, scale, ms));
    v = ib.select(eq(ib, rv, km), ib.constant(1, v.type), v);
    // apply H to the trailing columns
    Value upd = apply_reflector(ib, v, t, A, true);
    Value right = ib.compare(cols, kb, CompareDirection::kGT);
    A = ib.select(right, upd, A);
    Value newcol = ib.select(eq(ib, rv, km), from_batch(ib, ib.select(trivial, alpha, beta), ms),
                             ib.select(below, v, colk));
    A = ib.select(eq(ib, cols, kb), expand(ib, newcol, shape, r - 1), A);
    Value tidx = iota_s64(ib, tau.shape(), r - 2);
    tau = ib.select(eq(ib, tidx, splat(ib, k, tau.shape())), from_batch(ib, t, tau.shape()), tau);
    return {ib.add(k, ib.constant_int(1, k.type)), A, tau};
  };
  std::vector<Value> res = b.while_loop(init, cond, body);
  return {res[1], res[2]};
}

// H_0 ... H_{k-1} applied to the first `cols` columns of the identity (m x cols).
Value householder_product(FunctionBuilder& b, Value v, Value tau, int64_t cols) {
  const Shape& s = v.shape();
  size_t r = s.size();
  Shape qs = with_last2(batch_of(s), s[r - 2], cols);
  Value q = eye(b, TensorType(v.dtype(), qs));
  return apply_reflectors(b, v, tau, q, true, false);
}

std::vector<Value> lower_geqrf(LoweringContext& ctx) {
  check_real(ctx, ctx.out_type(0).dtype);
  auto [a, tau] = geqrf(ctx.b, coerce(ctx.b, ctx.tensor(0), ctx.out_type(0)));
  return {a, tau};
}

std::vector<Value> lower_householder_product(LoweringContext& ctx) {
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  Value v = coerce(ctx.b, ctx.tensor(0), out);
  Value tau = ctx.b.convert(ctx.tensor(1), out.dtype);
  return {householder_product(ctx.b, v, tau, out.shape.back())};
}

std::vector<Value> lower_ormqr(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  bool left = ctx.bool_arg(3), transpose = ctx.bool_arg(4);
  Value v = b.convert(ctx.tensor(0), out.dtype);
  Value tau = b.convert(ctx.tensor(1), out.dtype);
  Value c = coerce(b, ctx.tensor(2), out);
  // Q = H_0 ... H_{k-1}: Q c applies H_{k-1} first; Q^T c applies H_0 first; c Q applies H_0
  // first; c Q^T applies H_{k-1} first.
  bool ascending = left ? transpose : !transpose;
  return {apply_reflectors(b, v, tau, c, left, ascending)};
}

std::vector<Value> lower_linalg_qr(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& r_t = ctx.out_type(1);
  check_real(ctx, r_t.dtype);
  std::string mode = ctx.arg(1).ivalue.toStringRef();
  Value a = b.convert(ctx.tensor(0), r_t.dtype);
  const Shape& s = a.shape();
  size_t r = s.size();
  int64_t m = s[r - 2], n = s[r - 1], k = std::min(m, n);
  auto [f, tau] = geqrf(b, a);
  Shape z(r, 0), one(r, 1);
  Shape lim = s;
  lim[r - 2] = r_t.shape[r - 2];
  Value R = triangle(b, b.slice(f, z, lim, one), false);
  Value Q = b.constant(0, ctx.out_type(0));
  if (mode != "r") {
    int64_t qcols = ctx.out_type(0).shape.back();
    Shape vl = s;
    vl[r - 1] = k;
    Value v = b.slice(f, z, vl, one);
    Q = householder_product(b, v, tau, qcols);
  }
  return {Q, coerce(b, R, r_t)};
}

// ---- matrix exponential: scaling and squaring with a degree-18 Taylor polynomial ----
// s = max(0, ceil(log2 ||A||_1)) per matrix, exp(A / 2^s) by Horner, then s squarings (a
// while loop over the batch's largest s, each matrix squaring only while i < its own s).
std::vector<Value> lower_matrix_exp(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  check_real(ctx, out.dtype);
  // f64 throughout: the squarings amplify rounding, and CPU's own f32 result is within ~1e-6.
  ElementType ct = ElementType::kF64;
  Value a = coerce(b, ctx.tensor(0), out.with_dtype(ct));
  const Shape& shape = a.shape();
  const size_t r = shape.size();
  if (a.type.numel() == 0) return {coerce(b, a, out)};
  const Shape batch = batch_of(shape);
  std::vector<int64_t> bd = first_n(r - 2);
  auto mm = [&](FunctionBuilder& fb, Value x, Value y) {
    return fb.dot_general(x, y, bd, bd, {static_cast<int64_t>(r - 1)},
                          {static_cast<int64_t>(r - 2)}, x.type);
  };
  // ||A||_1: the largest absolute column sum
  Value colsum = sum_dim(b, b.unary("stablehlo.abs", a), r - 2);
  Value norm = reduce_dim(b, colsum, r - 2, "stablehlo.maximum", 0);
  Value sc = b.unary("stablehlo.ceil",
                     b.div(b.unary("stablehlo.log", norm), b.constant(std::log(2.0), norm.type)));
  sc = b.max(sc, zeros(b, sc.type));
  // NaN/inf norms: no scaling (the result is NaN/inf anyway)
  sc = b.select(shlo::is_finite(b, sc), sc, zeros(b, sc.type));
  Value scale = b.binary("stablehlo.power", b.constant(2, sc.type), sc);
  Value as = b.div(a, from_batch(b, scale, shape));
  Value id = eye(b, a.type);
  Value t = id;
  for (int k = 18; k >= 1; --k) {
    t = b.add(id, b.div(mm(b, as, t), b.constant(static_cast<double>(k), a.type)));
  }
  Value steps = b.convert(sc, ElementType::kS64);
  Value max_steps = reduce_dim(b, b.reshape(steps, {static_cast<int64_t>(steps.type.numel())}), 0,
                               "stablehlo.maximum", 0);
  TensorType k_t(ElementType::kS64, {});
  std::vector<Value> init = {b.constant_int(0, k_t), max_steps, steps, t};
  auto cond = [](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {ib.compare(st[0], st[1], CompareDirection::kLT)};
  };
  auto body = [&, shape](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    Value i = st[0], x = st[3];
    Value act = ib.compare(splat(ib, i, st[2].shape()), st[2], CompareDirection::kLT);
    Value sq = mm(ib, x, x);
    x = ib.select(from_batch(ib, act, shape), sq, x);
    return {ib.add(i, ib.constant_int(1, k_t)), st[1], st[2], x};
  };
  Value res = b.while_loop(init, cond, body)[3];
  return {coerce(b, res, out)};
}

// ---- Jacobi sweeps: pair order and stopping ----
// Both Jacobi methods visit the pairs (p, q), p < q < n, cyclically, one rotation per loop
// iteration. A sweep with no pair above the tolerance ends the loop (Jacobi converges
// quadratically, so a sweep after the off-diagonal part has reached rounding level leaves it
// there); kMaxSweeps caps ill-behaved inputs.
constexpr int64_t kMaxSweeps = 12;

// Loop state shared by both methods, ahead of their matrices.
struct SweepState {
  Value sweep, p, q;
  Value big;        // i1: some pair of this sweep was above the tolerance
  Value converged;  // i1: the last full sweep had none
};

std::vector<Value> sweep_init(FunctionBuilder& b) {
  TensorType k_t(ElementType::kS64, {}), p_t(ElementType::kPred, {});
  return {b.constant_int(0, k_t), b.constant_int(0, k_t), b.constant_int(1, k_t),
          b.constant(0, p_t), b.constant(0, p_t)};
}

SweepState sweep_state(const std::vector<Value>& st) { return {st[0], st[1], st[2], st[3], st[4]}; }

Value sweep_continue(FunctionBuilder& ib, const std::vector<Value>& st) {
  SweepState s = sweep_state(st);
  Value more =
      ib.compare(s.sweep, ib.constant_int(kMaxSweeps, s.sweep.type), CompareDirection::kLT);
  return ib.binary("stablehlo.and", more, ib.unary("stablehlo.not", s.converged));
}

// The next pair after rotating (p, q), where `pair_big` (batch, i1) says the pair was above
// the tolerance in some batch element; at a sweep's end, converged = no pair was.
std::vector<Value> sweep_advance(FunctionBuilder& ib, const SweepState& s, Value pair_big,
                                 int64_t n) {
  TensorType k_t(ElementType::kS64, {}), p_t(ElementType::kPred, {});
  Value any = pair_big;
  if (pair_big.rank() > 0) {
    any = ib.reduce_simple(pair_big, ib.constant(0, p_t), first_n(pair_big.shape().size()),
                           "stablehlo.or");
  }
  Value big = ib.binary("stablehlo.or", s.big, any);
  Value k1 = ib.constant_int(1, k_t);
  Value nq = ib.add(s.q, k1);
  Value wrap = ib.compare(nq, ib.constant_int(n, k_t), CompareDirection::kGE);
  Value np = ib.select(wrap, ib.add(s.p, k1), s.p);
  nq = ib.select(wrap, ib.add(np, k1), nq);
  Value done = ib.compare(np, ib.constant_int(n - 1, k_t), CompareDirection::kGE);
  Value sweep = ib.select(done, ib.add(s.sweep, k1), s.sweep);
  np = ib.select(done, ib.constant_int(0, k_t), np);
  nq = ib.select(done, k1, nq);
  Value converged = ib.binary("stablehlo.and", done, ib.unary("stablehlo.not", big));
  big = ib.select(done, ib.constant(0, p_t), big);
  return {sweep, np, nq, big, converged};
}

// |off| above tol * sqrt(|d1 d2|) (Demmel and Veselic's relative test) and above
// tol * scale (negligible against the whole matrix, so zero or tiny diagonals still stop).
Value jacobi_big(FunctionBuilder& ib, Value off, Value d1, Value d2, Value scale, int64_t n) {
  Value tol = ib.constant(
      static_cast<double>(std::max<int64_t>(n, 4)) * std::numeric_limits<double>::epsilon(),
      off.type);
  Value a = ib.unary("stablehlo.abs", off);
  Value rel = ib.mul(tol, ib.unary("stablehlo.sqrt", ib.unary("stablehlo.abs", ib.mul(d1, d2))));
  return ib.binary("stablehlo.and", ib.compare(a, rel, CompareDirection::kGT),
                   ib.compare(a, ib.mul(tol, scale), CompareDirection::kGT));
}

// ---- SVD: one-sided Jacobi (Hestenes) in f64 ----
// Columns of A (m >= n; wide inputs use A^T) are orthogonalized pairwise by plane rotations,
// accumulated in V; sigma_j = ||a_j||, u_j = a_j / sigma_j (0 for sigma_j = 0), sorted
// descending. Singular vectors carry LAPACK-arbitrary signs, so they agree with CPU up to
// sign; products such as U S V^T, pinv and norms agree. full_matrices with m != n stays on
// the CPU (completing the basis is not implemented).

// Column j (0-d s64) of x (batch x m x n) as batch x m.
Value column(FunctionBuilder& b, Value x, Value j) {
  const Shape& s = x.shape();
  size_t r = s.size();
  Value cols = iota_s64(b, s, r - 1);
  return sum_dim(b, b.select(eq(b, cols, splat(b, j, s)), x, zeros(b, x.type)), r - 1);
}

// x with columns p and q replaced by c*x_p - s*x_q and s*x_p + c*x_q (c, s: batch).
Value rotate_columns(FunctionBuilder& b, Value x, Value p, Value q, Value c, Value sn) {
  const Shape& s = x.shape();
  size_t r = s.size();
  Value xp = column(b, x, p), xq = column(b, x, q);
  const Shape cs = xp.shape();
  Value cb = from_batch(b, c, cs), sb = from_batch(b, sn, cs);
  Value np = b.sub(b.mul(cb, xp), b.mul(sb, xq));
  Value nq = b.add(b.mul(sb, xp), b.mul(cb, xq));
  Value cols = iota_s64(b, s, r - 1);
  x = b.select(eq(b, cols, splat(b, p, s)), expand(b, np, s, r - 1), x);
  return b.select(eq(b, cols, splat(b, q, s)), expand(b, nq, s, r - 1), x);
}

// The 2x2 problem of pair (p, q) in A: d1, d2 (diagonal) and off (off-diagonal), batch-shaped.
using PairFn = std::function<std::array<Value, 3>(FunctionBuilder&, Value A, Value p, Value q)>;
// A after the rotation (c, sn) of pair (p, q).
using RotateFn =
    std::function<Value(FunctionBuilder&, Value A, Value p, Value q, Value c, Value sn)>;

// Cyclic Jacobi sweeps on A (V = I accumulates the rotations) until converged or
// kMaxSweeps; `scale` (batch) is what `off` is negligible against. Returns {A, V}.
std::pair<Value, Value> jacobi_sweeps(FunctionBuilder& b, Value a, Value scale, int64_t n,
                                      PairFn pair, RotateFn rotate) {
  Value v0 = eye(b, TensorType(a.dtype(), with_last2(batch_of(a.shape()), n, n)));
  if (n < 2) return {a, v0};
  std::vector<Value> init = sweep_init(b);
  init.insert(init.end(), {a, v0, scale});
  auto cond = [](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    return {sweep_continue(ib, st)};
  };
  auto body = [=](FunctionBuilder& ib, const std::vector<Value>& st) -> std::vector<Value> {
    SweepState ss = sweep_state(st);
    Value p = ss.p, q = ss.q, A = st[5], V = st[6];
    auto [d1, d2, off] = pair(ib, A, p, q);
    Value pair_big = jacobi_big(ib, off, d1, d2, st[7], n);
    // The rotation that zeroes off: t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)).
    Value zero = zeros(ib, off.type), one = ib.constant(1, off.type);
    Value skip = eq(ib, off, zero);
    Value g = ib.select(skip, one, off);
    Value zeta = ib.div(ib.sub(d2, d1), ib.mul(ib.constant(2, g.type), g));
    Value sign = ib.select(ib.compare(zeta, zero, CompareDirection::kGE), one, ib.neg(one));
    Value t = ib.div(sign, ib.add(ib.unary("stablehlo.abs", zeta),
                                  ib.unary("stablehlo.sqrt", ib.add(one, ib.mul(zeta, zeta)))));
    Value c = ib.unary("stablehlo.rsqrt", ib.add(one, ib.mul(t, t)));
    Value sn = ib.mul(c, t);
    c = ib.select(skip, one, c);
    sn = ib.select(skip, zero, sn);
    A = rotate(ib, A, p, q, c, sn);
    V = rotate_columns(ib, V, p, q, c, sn);
    std::vector<Value> next = sweep_advance(ib, ss, pair_big, n);
    next.insert(next.end(), {A, V, st[7]});
    return next;
  };
  std::vector<Value> res = b.while_loop(init, cond, body);
  return {res[5], res[6]};
}

struct Svd {
  Value u, s, v;  // u: batch x m x n, s: batch x n, v: batch x n x n
};

// x @ y over their (equal) batch dims.
Value batched_mm(FunctionBuilder& b, Value x, Value y) {
  const size_t r = x.shape().size();
  std::vector<int64_t> bd = first_n(r - 2);
  Shape os = batch_of(x.shape());
  os.push_back(x.shape()[r - 2]);
  os.push_back(y.shape()[r - 1]);
  return b.dot_general(x, y, bd, bd, {static_cast<int64_t>(r - 1)}, {static_cast<int64_t>(r - 2)},
                       TensorType(x.dtype(), os));
}

// The permutation matrix of a stable sort of `keys` (batch x n), descending (singular values)
// or ascending (eigenvalues): P[j, t] = 1 (in `dtype`) where element j goes to position t, its
// rank, the number of elements that sort before it.
Value sort_permutation(FunctionBuilder& b, Value keys, bool descending, ElementType dtype) {
  Shape pair = keys.shape();
  pair.push_back(pair.back());  // batch x n(j) x n(k)
  Value kj = b.broadcast_in_dim(keys, pair, all_but(pair.size(), pair.size() - 1));
  Value kk = b.broadcast_in_dim(keys, pair, all_but(pair.size(), pair.size() - 2));
  Value jj = iota_s64(b, pair, pair.size() - 2), ii = iota_s64(b, pair, pair.size() - 1);
  Value before = b.binary(
      "stablehlo.or", b.compare(kk, kj, descending ? CompareDirection::kGT : CompareDirection::kLT),
      b.binary("stablehlo.and", eq(b, kk, kj), b.compare(ii, jj, CompareDirection::kLT)));
  Value rank = sum_dim(b, b.convert(before, ElementType::kS64), pair.size() - 1);  // batch x n
  return b.convert(eq(b, b.broadcast_in_dim(rank, pair, all_but(pair.size(), pair.size() - 1)),
                      iota_s64(b, pair, pair.size() - 1)),
                   dtype);
}

Svd jacobi_svd(FunctionBuilder& b, Value a) {
  const Shape shape = a.shape();
  const size_t r = shape.size();
  const int64_t n = shape[r - 1];
  const Shape batch = batch_of(shape);
  // ||A||_F^2 per batch element (rotations keep it), the scale of the column products.
  Value fro2 = sum_dim(b, sum_dim(b, b.mul(a, a), r - 1), r - 2);
  auto gram = [](FunctionBuilder& ib, Value A, Value p, Value q) -> std::array<Value, 3> {
    Value ap = column(ib, A, p), aq = column(ib, A, q);
    size_t cd = static_cast<size_t>(ap.rank()) - 1;
    return {sum_dim(ib, ib.mul(ap, ap), cd), sum_dim(ib, ib.mul(aq, aq), cd),
            sum_dim(ib, ib.mul(ap, aq), cd)};
  };
  auto [A, V] = jacobi_sweeps(b, a, fro2, n, gram, rotate_columns);
  Value sig = b.unary("stablehlo.sqrt", sum_dim(b, b.mul(A, A), r - 2));  // batch x n
  Value nz = b.compare(sig, zeros(b, sig.type), CompareDirection::kGT);
  Value safe = b.select(nz, sig, b.constant(1, sig.type));
  Value U = b.div(A, expand(b, safe, shape, r - 2));
  U = b.select(expand(b, nz, shape, r - 2), U, zeros(b, U.type));
  // sort descending: column j of U goes to position t where P[j, t] = 1
  Value P = sort_permutation(b, sig, /*descending=*/true, a.dtype());
  Value sig_sorted =
      b.reshape(batched_mm(b, b.reshape(sig, with_last2(batch, 1, n)), P), sig.shape());
  return {batched_mm(b, U, P), sig_sorted, batched_mm(b, V, P)};
}

// An orthonormal m x cols basis whose leading columns are u's (batch x m x k, orthonormal
// columns or zero columns, zeros last): Householder QR of u, columns signed by diag(R).
Value complete_basis(FunctionBuilder& b, Value u, int64_t cols) {
  const Shape& s = u.shape();
  size_t r = s.size();
  int64_t k = s[r - 1];
  auto [f, tau] = geqrf(b, u);
  Value q = householder_product(b, f, tau, cols);  // batch x m x cols
  Value rows = iota_s64(b, s, r - 2), cl = iota_s64(b, s, r - 1);
  Value diag = sum_dim(b, b.select(eq(b, rows, cl), f, zeros(b, f.type)), r - 2);  // batch x k
  Value sign = b.select(b.compare(diag, zeros(b, diag.type), CompareDirection::kLT),
                        b.constant(-1, diag.type), b.constant(1, diag.type));
  if (cols > k) {
    Shape ps = batch_of(s);
    ps.push_back(cols - k);
    sign = b.concatenate({sign, b.constant(1, TensorType(diag.dtype(), ps))},
                         static_cast<int64_t>(r - 2));
  }
  return b.mul(q, expand(b, sign, q.shape(), r - 2));
}

std::vector<Value> lower_linalg_svd(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& s_t = ctx.out_type(1);
  check_real(ctx, s_t.dtype);
  bool full = ctx.bool_arg(1), compute_uv = ctx.bool_arg(2);
  Value a = ctx.tensor(0);
  const Shape& shape = a.shape();
  size_t r = shape.size();
  int64_t m = shape[r - 2], n = shape[r - 1];
  if (a.type.numel() == 0) {
    // No singular values; full_matrices asks for identity bases.
    auto basis = [&](const TensorType& t) {
      return t.numel() > 0 && t.shape[r - 2] == t.shape[r - 1] ? eye(b, t) : zeros(b, t);
    };
    return {basis(ctx.out_type(0)), zeros(b, s_t), basis(ctx.out_type(2))};
  }
  Value x = b.convert(a, ElementType::kF64);
  bool wide = m < n;
  if (wide) x = transpose_last2(b, x);
  Svd d = jacobi_svd(b, x);
  Value S = coerce(b, d.s, s_t);
  if (!compute_uv) return {zeros(b, ctx.out_type(0)), S, zeros(b, ctx.out_type(2))};
  // d.u: tall x k with zero columns for zero singular values: make it an orthonormal basis
  // (all `tall` columns for full_matrices).
  int64_t tall = std::max(m, n), k = std::min(m, n);
  Value U = complete_basis(b, d.u, full ? tall : k), V = d.v;
  if (wide) std::swap(U, V);
  return {coerce(b, U, ctx.out_type(0)), S, coerce(b, transpose_last2(b, V), ctx.out_type(2))};
}

// ---- symmetric eigendecomposition: cyclic two-sided Jacobi in f64 ----
// Eigenvalues ascending like LAPACK's syevd; eigenvectors agree with it up to sign.
std::vector<Value> lower_linalg_eigh(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& w_t = ctx.out_type(0);
  check_real(ctx, w_t.dtype);
  std::string uplo = ctx.arg(1).ivalue.toStringRef();
  bool compute_v = ctx.bool_arg(2);
  Value a = b.convert(ctx.tensor(0), ElementType::kF64);
  const Shape shape = a.shape();
  const size_t r = shape.size();
  const int64_t n = shape[r - 1];
  if (a.type.numel() == 0) return {zeros(b, w_t), zeros(b, ctx.out_type(1))};
  // the referenced triangle, mirrored
  bool lower = uplo == "L" || uplo == "l";
  Value tri = triangle(b, a, lower, 0);
  Value strict = triangle(b, a, lower, lower ? -1 : 1);
  a = b.add(tri, transpose_last2(b, strict));
  const Shape batch = batch_of(shape);
  // ||A||_F per batch element (rotations keep it), the scale of the entries.
  Value fro = b.unary("stablehlo.sqrt", sum_dim(b, sum_dim(b, b.mul(a, a), r - 1), r - 2));
  auto gram = [](FunctionBuilder& ib, Value A, Value p, Value q) -> std::array<Value, 3> {
    Value ap = column(ib, A, p), aq = column(ib, A, q);
    const Shape cs = ap.shape();
    size_t cd = cs.size() - 1;
    Value rv = iota_s64(ib, cs, cd);
    auto pick = [&](Value col, Value idx) {
      return sum_dim(ib, ib.select(eq(ib, rv, splat(ib, idx, cs)), col, zeros(ib, col.type)), cd);
    };
    return {pick(ap, p), pick(aq, q), pick(aq, p)};
  };
  // Two-sided: rotate the columns, then the rows.
  auto rotate = [](FunctionBuilder& ib, Value A, Value p, Value q, Value c, Value sn) {
    A = rotate_columns(ib, A, p, q, c, sn);
    return transpose_last2(ib, rotate_columns(ib, transpose_last2(ib, A), p, q, c, sn));
  };
  auto [A, V] = jacobi_sweeps(b, a, fro, n, gram, rotate);
  Value rows = iota_s64(b, shape, r - 2), cols = iota_s64(b, shape, r - 1);
  Value w = sum_dim(b, b.select(eq(b, rows, cols), A, zeros(b, A.type)), r - 1);  // batch x n
  // ascending order (stable) as a permutation matrix
  Value P = sort_permutation(b, w, /*descending=*/false, a.dtype());
  Value ws = b.reshape(batched_mm(b, b.reshape(w, with_last2(batch, 1, n)), P), w.shape());
  Value vecs =
      compute_v ? coerce(b, batched_mm(b, V, P), ctx.out_type(1)) : zeros(b, ctx.out_type(1));
  return {coerce(b, ws, w_t), vecs};
}

// ---- least squares: linalg_lstsq(A, B, rcond, driver) ----
// Full-rank solution by Householder QR (m >= n: R^-1 Q^T B; m < n: the minimum-norm
// Q R^-T B), as LAPACK's gels; residuals (m > n, drivers other than gelsy), gelsy's rank
// (|R_ii| > rcond * max |R_ii|) and gelsd/gelss singular values as the meta kernel asks.
std::vector<Value> lower_linalg_lstsq(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& x_t = ctx.out_type(0);
  check_real(ctx, x_t.dtype);
  Value a = ctx.tensor(0), rhs = ctx.tensor(1);
  TORCH_CHECK_NOT_IMPLEMENTED(
      rhs.rank() >= 2 && x_t.rank() >= 2 && a.type.numel() > 0 && rhs.type.numel() > 0,
      "torchtpu: linalg_lstsq lowers matrix right-hand sides only");
  const Shape batch = batch_of(x_t.shape);
  const size_t r = x_t.shape.size();
  const int64_t m = a.shape()[a.shape().size() - 2], n = a.shape().back();
  const int64_t k = rhs.shape().back();
  ElementType ct = ElementType::kF64;
  Value A = coerce(b, a, TensorType(ct, with_last2(batch, m, n)));
  Value B = coerce(b, rhs, TensorType(ct, with_last2(batch, m, k)));
  Shape z(r, 0), one(r, 1);
  Value x, rdiag;
  if (m >= n) {
    auto [f, tau] = geqrf(b, A);
    Value qtb = apply_reflectors(b, f, tau, B, true, true);
    Shape lim = with_last2(batch, n, k);
    Value y = b.slice(qtb, z, lim, one);
    Value R = triangle(b, b.slice(f, z, with_last2(batch, n, n), one), false);
    x = tri_solve(b, R, y, true, false, false, false);
    rdiag = R;
  } else {
    auto [f, tau] = geqrf(b, transpose_last2(b, A));  // n x m
    Value R = triangle(b, b.slice(f, z, with_last2(batch, m, m), one), false);
    Value zz = tri_solve(b, R, B, true, false, false, true);  // m x k
    std::vector<int64_t> lo(r, 0), hi(r, 0), in(r, 0);
    hi[r - 2] = n - m;
    Value padded = b.pad(zz, b.constant(0, TensorType(ct, {})), lo, hi, in);
    Shape vl = with_last2(batch, n, m);
    x = apply_reflectors(b, b.slice(f, z, vl, one), tau, padded, true, false);
    rdiag = R;
  }
  std::vector<Value> outs = {coerce(b, x, x_t)};
  // residuals
  const TensorType& res_t = ctx.out_type(1);
  if (res_t.numel() > 0) {
    std::vector<int64_t> bd = first_n(r - 2);
    Value ax = b.dot_general(A, x, bd, bd, {static_cast<int64_t>(r - 1)},
                             {static_cast<int64_t>(r - 2)}, B.type);
    Value d = b.sub(ax, B);
    outs.push_back(coerce(b, sum_dim(b, b.mul(d, d), r - 2), res_t));
  } else {
    outs.push_back(zeros(b, res_t));
  }
  // rank
  const TensorType& rank_t = ctx.out_type(2);
  if (rank_t.numel() > 0) {
    const Shape& rs = rdiag.shape();
    Value rows = iota_s64(b, rs, r - 2), cols = iota_s64(b, rs, r - 1);
    Value diag =
        b.unary("stablehlo.abs",
                sum_dim(b, b.select(eq(b, rows, cols), rdiag, zeros(b, rdiag.type)), r - 1));
    Value mx = reduce_dim(b, diag, r - 2, "stablehlo.maximum", 0);
    size_t rc = ctx.index_of("rcond");
    double rcond = ctx.is_none(rc)
                       ? (x_t.dtype == ElementType::kF64 ? 2.220446049250313e-16 : 1.1920929e-07) *
                             static_cast<double>(std::max(m, n))
                       : ctx.double_arg(rc);
    Value thr = b.mul(mx, b.constant(rcond, mx.type));
    Value big = b.compare(diag, from_batch(b, thr, diag.shape()), CompareDirection::kGT);
    outs.push_back(coerce(b, sum_dim(b, b.convert(big, ElementType::kS64), r - 2), rank_t));
  } else {
    outs.push_back(zeros(b, rank_t));
  }
  // singular values (gelsd / gelss)
  const TensorType& sv_t = ctx.out_type(3);
  if (sv_t.numel() > 0) {
    Value xa = m < n ? transpose_last2(b, A) : A;
    outs.push_back(coerce(b, jacobi_svd(b, xa).s, sv_t));
  } else {
    outs.push_back(zeros(b, sv_t));
  }
  return outs;
}

TORCHTPU_LOWERING("aten::linalg_solve_triangular", lower_linalg_solve_triangular);
TORCHTPU_LOWERING("aten::triangular_solve", lower_triangular_solve);
TORCHTPU_LOWERING("aten::linalg_cholesky_ex", lower_linalg_cholesky_ex);
TORCHTPU_LOWERING("aten::cholesky", lower_cholesky);
TORCHTPU_LOWERING("aten::_cholesky_solve_helper", lower_cholesky_solve_helper);
TORCHTPU_LOWERING("aten::cholesky_inverse", lower_cholesky_inverse);
TORCHTPU_LOWERING("aten::linalg_lu_factor_ex", lower_lu_factor_ex);
TORCHTPU_LOWERING("aten::lu_unpack", lower_lu_unpack);
TORCHTPU_LOWERING("aten::linalg_lu", lower_linalg_lu);
TORCHTPU_LOWERING("aten::linalg_lu_solve", lower_linalg_lu_solve);
TORCHTPU_LOWERING("aten::linalg_inv_ex", lower_linalg_inv_ex);
TORCHTPU_LOWERING("aten::_linalg_det", lower_linalg_det);
TORCHTPU_LOWERING("aten::_linalg_slogdet", lower_linalg_slogdet);
TORCHTPU_LOWERING("aten::_linalg_solve_ex", lower_linalg_solve_ex);
TORCHTPU_LOWERING("aten::geqrf", lower_geqrf);
TORCHTPU_LOWERING("aten::linalg_householder_product", lower_householder_product);
TORCHTPU_LOWERING("aten::ormqr", lower_ormqr);
TORCHTPU_LOWERING("aten::linalg_qr", lower_linalg_qr);
TORCHTPU_LOWERING("aten::linalg_matrix_exp", lower_matrix_exp);
TORCHTPU_LOWERING("aten::_linalg_svd", lower_linalg_svd);
TORCHTPU_LOWERING("aten::_linalg_eigh", lower_linalg_eigh);
TORCHTPU_LOWERING("aten::linalg_lstsq", lower_linalg_lstsq);

}  // namespace
}  // namespace torchtpu::lowering
