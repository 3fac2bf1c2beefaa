// Counting into bins: torchtpu::histogram_from_edges, the static program behind torch.histogram
// and torch.histogramdd (their kernels, which pick the bin edges, are in aten/histogram.cpp), and
// the two programs behind torch.bincount (its kernel, with the one sync between them, is in
// aten/bincount.cpp): torchtpu::bincount_max sizes the result, torchtpu::bincount_static counts.
#include <limits>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/sorting.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// bins (P,) with upd[i] (M,) added at bins[idx[i]] (idx (M,) int64, in range), in index order
// as the CPU kernels' loops add.
Value scatter_add(FunctionBuilder& b, Value bins, Value idx, Value upd) {
  int64_t m = idx.type.numel();
  return b.scatter(bins, b.reshape(idx, {m, 1}), upd, {{}, {0}, {0}, 1}, add_region);
}

// histogram_from_edges(self (M, D), edges[D], weight (M)?, density) -> hist (n_0, ..., n_D-1)
// with n_d = edges[d].numel() - 1. As on the CPU: an element lands in the bin whose left edge
// is the last edge <= it (std::upper_bound - 1); the rightmost bin also takes its right edge;
// elements outside [first, last] edge in any dimension (and NaN) are dropped.
std::vector<Value> lower_histogram_from_edges(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<Value> edges = ctx.tensor_list(1);
  const TensorType& out = ctx.out_type();
  int64_t m = x.shape()[0];
  int64_t p = out.numel();
  if (p == 0) return {b.constant(0, out)};
  if (m == 0) return {b.constant(0, out)};
  ElementType t = x.dtype();
  TensorType pred_m(ElementType::kPred, {m});
  TensorType s64_m(ElementType::kS64, {m});
  Value valid = b.constant(1, pred_m);
  Value flat = b.constant_int(0, s64_m);
  for (size_t d = 0; d < edges.size(); ++d) {
    Value e = b.convert(edges[d], t);
    int64_t ne = e.type.numel();
    int64_t nb = ne - 1;
    Value col = b.reshape(
        b.slice(x, {0, static_cast<int64_t>(d)}, {m, static_cast<int64_t>(d) + 1}, {1, 1}), {m});
    Value lo = b.broadcast_to(b.reshape(b.slice(e, {0}, {1}, {1}), {}), {m});
    Value hi = b.broadcast_to(b.reshape(b.slice(e, {ne - 1}, {ne}, {1}), {}), {m});
    Value in = b.binary("stablehlo.and", b.compare(col, lo, CompareDirection::kGE),
                        b.compare(col, hi, CompareDirection::kLE));
    valid = b.binary("stablehlo.and", valid, in);
    // upper_bound - 1: how many edges are <= the element, less one.
    Value ub = binary_search(b, b.reshape(e, {1, ne}), b.reshape(col, {1, m}), /*right=*/true);
    Value pos = b.sub(b.reshape(ub, {m}), b.constant_int(1, s64_m));
    pos = b.clamp(b.constant_int(0, s64_m), pos, b.constant_int(nb - 1, s64_m));
    flat = b.add(b.mul(flat, b.constant_int(nb, s64_m)), pos);
  }
  Value w = ctx.is_none(2) ? b.constant(1, TensorType(t, {m}))
                           : b.reshape(b.convert(ctx.tensor(2), t), {m});
  // Scatter-add each weight into its bin; dropped elements go to an extra bin p, cut off after.
  Value target = b.select(valid, flat, b.constant_int(p, s64_m));
  Value hist = scatter_add(b, b.constant(0, TensorType(t, {p + 1})), target, w);
  hist = b.slice(hist, {0}, {p}, {1});
  hist = b.reshape(hist, out.shape);
  if (ctx.bool_arg(3)) {  // density: / total, then / each dimension's bin widths
    std::vector<int64_t> all;
    for (int64_t i = 0; i < hist.rank(); ++i) all.push_back(i);
    Value total = b.reduce_simple(hist, b.constant(0, TensorType(t, {})), all, "stablehlo.add");
    hist = b.div(hist, b.broadcast_to(total, out.shape));
    for (size_t d = 0; d < edges.size(); ++d) {
      Value e = b.convert(edges[d], t);
      int64_t ne = e.type.numel();
      Value width = b.sub(b.slice(e, {1}, {ne}, {1}), b.slice(e, {0}, {ne - 1}, {1}));
      hist = b.div(hist, b.broadcast_in_dim(width, out.shape, {static_cast<int64_t>(d)}));
    }
  }
  return {coerce(b, hist, out)};
}

// bincount_max(self (N,), N > 0) -> int64 0-d: max(self), or -1 when any element is negative
// (the CPU's "non-negative inputs" error; one value so the host reads once).
std::vector<Value> lower_bincount_max(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  x = b.reshape(b.convert(x, ElementType::kS64), {x.type.numel()});
  TensorType s64(ElementType::kS64, {});
  Value mx = b.reduce_simple(x, b.constant_int(std::numeric_limits<int64_t>::min(), s64), {0},
                             "stablehlo.maximum");
  Value mn = b.reduce_simple(x, b.constant_int(std::numeric_limits<int64_t>::max(), s64), {0},
                             "stablehlo.minimum");
  Value neg = b.compare(mn, b.constant_int(0, s64), CompareDirection::kLT);
  return {coerce(b, b.select(neg, b.constant_int(-1, s64), mx), ctx.out_type())};
}

// bincount_static(self (N,), weights (N,)?, size) -> (size,): out[self[i]] += weights[i] (or 1).
// The kernel has checked 0 <= self < size.
std::vector<Value> lower_bincount_static(LoweringContext& ctx) {
  auto& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  int64_t n = x.type.numel();
  if (n == 0 || out.numel() == 0) return {zeros(b, out)};
  Value upd = ctx.is_none(1) ? b.constant_int(1, TensorType(out.dtype, {n}))
                             : b.reshape(b.convert(ctx.tensor(1), out.dtype), {n});
  return {scatter_add(b, zeros(b, out), b.convert(x, ElementType::kS64), upd)};
}

TORCHTPU_LOWERING("torchtpu::histogram_from_edges", lower_histogram_from_edges);
TORCHTPU_LOWERING("torchtpu::bincount_max", lower_bincount_max);
TORCHTPU_LOWERING("torchtpu::bincount_static", lower_bincount_static);

}  // namespace
}  // namespace torchtpu::lowering
