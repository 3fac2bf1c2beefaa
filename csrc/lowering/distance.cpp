// Pairwise distances: _cdist_forward/_cdist_backward and _pdist_forward/_pdist_backward, with
// the p-norm cases of ATen's Distance kernels (p = 0 counts differing coordinates, p = inf is
// the max norm) and their gradient rules (zero where the distance is zero). Distances are
// computed directly from the differences (the CPU kernel's non-mm path).
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

constexpr double kInf = std::numeric_limits<double>::infinity();

using Shape = std::vector<int64_t>;

// |d|^p summed over `dim`, then ^(1/p) (p = 0: count of nonzeros; p = inf: max).
Value pnorm(FunctionBuilder& b, Value d, double p, int64_t dim) {
  Value ad = b.unary("stablehlo.abs", d);
  TensorType s(d.dtype(), {});
  Value zero = b.constant(0, s);
  if (p == 0) {
    Value nz = b.convert(b.compare(ad, cst(b, 0, ad), CompareDirection::kNE), d.dtype());
    return b.reduce_simple(nz, zero, {dim}, "stablehlo.add");
  }
  if (std::isinf(p)) return b.reduce_simple(ad, zero, {dim}, "stablehlo.maximum");
  if (p == 1) return b.reduce_simple(ad, zero, {dim}, "stablehlo.add");
  if (p == 2) {
    return b.unary("stablehlo.sqrt", b.reduce_simple(b.mul(d, d), zero, {dim}, "stablehlo.add"));
  }
  Value sum =
      b.reduce_simple(b.binary("stablehlo.power", ad, cst(b, p, ad)), zero, {dim}, "stablehlo.add");
  return b.binary("stablehlo.power", sum, cst(b, 1.0 / p, sum));
}

// d dist / d diff for one coordinate, times grad (all broadcast to diff's shape).
Value dist_grad(FunctionBuilder& b, Value diff, Value grad, Value dist, double p) {
  Value zero = cst(b, 0, diff);
  Value sign = b.unary("stablehlo.sign", diff);
  Value ad = b.unary("stablehlo.abs", diff);
  Value dz = cmp(b, dist, zero, CompareDirection::kEQ);
  if (p == 0) return zero;
  if (p == 1) return b.mul(sign, grad);
  if (std::isinf(p)) {
    Value hit = b.convert(cmp(b, ad, dist, CompareDirection::kEQ), diff.dtype());
    return b.mul(b.mul(sign, hit), grad);
  }
  if (p == 2) return b.select(dz, zero, b.div(b.mul(diff, grad), dist));
  if (p < 2) {
    Value r = b.div(b.mul(b.mul(sign, b.binary("stablehlo.power", ad, cst(b, p - 1, ad))), grad),
                    b.binary("stablehlo.power", dist, cst(b, p - 1, dist)));
    Value bad = dz;
    if (p < 1) bad = lor(b, bad, cmp(b, diff, zero, CompareDirection::kEQ));
    return b.select(bad, zero, r);
  }
  Value r = b.div(b.mul(b.mul(diff, b.binary("stablehlo.power", ad, cst(b, p - 2, ad))), grad),
                  b.binary("stablehlo.power", dist, cst(b, p - 1, dist)));
  return b.select(dz, zero, r);
}

// x1: batch x P x M, x2: batch x R x M -> (batch x P x R x M) differences.
Value pair_diffs(FunctionBuilder& b, Value x1, Value x2) {
  const Shape& a = x1.shape();
  size_t r = a.size();
  Shape full(a.begin(), a.end() - 2);
  int64_t P = a[r - 2], M = a[r - 1], R = x2.shape()[r - 2];
  full.push_back(P);
  full.push_back(R);
  full.push_back(M);
  std::vector<int64_t> d1, d2;
  for (size_t i = 0; i < r - 2; ++i) {
    d1.push_back(static_cast<int64_t>(i));
    d2.push_back(static_cast<int64_t>(i));
  }
  d1.push_back(static_cast<int64_t>(r - 2));
  d1.push_back(static_cast<int64_t>(r));
  d2.push_back(static_cast<int64_t>(r - 1));
  d2.push_back(static_cast<int64_t>(r));
  return b.sub(b.broadcast_in_dim(x1, full, d1), b.broadcast_in_dim(x2, full, d2));
}

// Both inputs broadcast to the result's batch dims.
std::pair<Value, Value> batched(LoweringContext& ctx, size_t i1, size_t i2, const Shape& batch,
                                ElementType ct) {
  FunctionBuilder& b = ctx.b;
  auto fit = [&](Value v) {
    Shape s = batch;
    s.push_back(v.shape()[v.shape().size() - 2]);
    s.push_back(v.shape().back());
    return coerce(b, v, TensorType(ct, s));
  };
  return {fit(ctx.tensor(i1)), fit(ctx.tensor(i2))};
}

std::vector<Value> lower_cdist_forward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(out.dtype);
  double p = ctx.double_arg(2);
  Shape batch(out.shape.begin(), out.shape.end() - 2);
  auto [x1, x2] = batched(ctx, 0, 1, batch, ct);
  Value d = pair_diffs(b, x1, x2);
  return {coerce(b, pnorm(b, d, p, d.rank() - 1), out)};
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1.
std::vector<Value> lower_cdist_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(out.dtype);
  double p = ctx.double_arg(3);
  Value grad = ctx.tensor(0);
  Shape batch(grad.shape().begin(), grad.shape().end() - 2);
  auto [x1, x2] = batched(ctx, 1, 2, batch, ct);
  Value d = pair_diffs(b, x1, x2);
  Value g = coerce(b, grad, TensorType(ct, grad.shape()));
  Value dist = coerce(b, ctx.tensor(4), TensorType(ct, grad.shape()));
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < d.rank() - 1; ++i) keep.push_back(i);
  Value gb = b.broadcast_in_dim(g, d.shape(), keep);
  Value db = b.broadcast_in_dim(dist, d.shape(), keep);
  Value per = dist_grad(b, d, gb, db, p);
  Value r =
      b.reduce_simple(per, b.constant(0, TensorType(ct, {})), {d.rank() - 2}, "stablehlo.add");
  // x1 broadcast over batch dims it lacks or has as 1 (an empty batch, for one) gets their sum,
  // as the gradient of an expand does.
  std::vector<int64_t> summed;
  const int64_t lead = r.rank() - out.rank();
  for (int64_t i = 0; i < r.rank(); ++i) {
    if (i < lead || (out.shape[static_cast<size_t>(i - lead)] == 1 && r.shape()[i] != 1)) {
      summed.push_back(i);
    }
  }
  if (!summed.empty()) {
    r = b.reduce_simple(r, b.constant(0, TensorType(ct, {})), summed, "stablehlo.add");
  }
  return {coerce(b, b.reshape(r, out.shape), out)};
}

// The condensed (row-major upper triangle, i < j) entries of an N x N matrix.
Value condense(FunctionBuilder& b, Value m, int64_t n) {
  std::vector<Value> parts;
  for (int64_t i = 0; i + 1 < n; ++i) {
    Value row = b.slice(m, {i, i + 1}, {i + 1, n}, {1, 1});
    parts.push_back(b.reshape(row, {n - i - 1}));
  }
  if (parts.empty()) return b.constant(0, TensorType(m.dtype(), {0}));
  return parts.size() == 1 ? parts[0] : b.concatenate(parts, 0);
}

// The inverse: an N x N matrix holding the condensed values above the diagonal, 0 elsewhere.
Value expand_condensed(FunctionBuilder& b, Value c, int64_t n) {
  std::vector<Value> rows;
  Value zero = b.constant(0, TensorType(c.dtype(), {}));
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = n - i - 1;
    Value seg =
        len > 0 ? b.slice(c, {off}, {off + len}, {1}) : b.constant(0, TensorType(c.dtype(), {0}));
    off += len;
    Value row = b.pad(seg, zero, {i + 1}, {0}, {0});
    rows.push_back(b.reshape(row, {1, n}));
  }
  return rows.size() == 1 ? rows[0] : b.concatenate(rows, 0);
}

std::vector<Value> lower_pdist_forward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(out.dtype);
  double p = ctx.double_arg(1);
  Value x = b.convert(ctx.tensor(0), ct);
  int64_t n = x.shape()[0];
  if (out.numel() == 0) return {b.constant(0, out)};
  Value d = pair_diffs(b, x, x);
  return {coerce(b, condense(b, pnorm(b, d, p, 2), n), out)};
}

// _pdist_backward(grad, self, p, pdist) -> grad of self.
std::vector<Value> lower_pdist_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(out.dtype);
  double p = ctx.double_arg(2);
  Value x = b.convert(ctx.tensor(1), ct);
  int64_t n = x.shape()[0];
  if (n < 2 || out.numel() == 0) return {b.constant(0, out)};
  Value g = expand_condensed(b, b.convert(ctx.tensor(0), ct), n);
  Value dist = expand_condensed(b, b.convert(ctx.tensor(3), ct), n);
  g = b.add(g, b.transpose(g, {1, 0}));
  dist = b.add(dist, b.transpose(dist, {1, 0}));
  Value d = pair_diffs(b, x, x);
  Value gb = b.broadcast_in_dim(g, d.shape(), {0, 1});
  Value db = b.broadcast_in_dim(dist, d.shape(), {0, 1});
  // the diagonal pairs (i, i) have grad 0 and distance 0: contribute nothing
  Value per = dist_grad(b, d, gb, db, p);
  Value r = b.reduce_simple(per, b.constant(0, TensorType(ct, {})), {1}, "stablehlo.add");
  return {coerce(b, r, out)};
}

TORCHTPU_LOWERING("aten::_cdist_forward", lower_cdist_forward);
TORCHTPU_LOWERING("aten::_cdist_backward", lower_cdist_backward);
TORCHTPU_LOWERING("aten::_pdist_forward", lower_pdist_forward);
TORCHTPU_LOWERING("aten::_pdist_backward", lower_pdist_backward);

}  // namespace
}  // namespace torchtpu::lowering
