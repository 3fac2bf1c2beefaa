// sort / topk / kthvalue as stablehlo.sort with a comparator region. Gradients come from
// PyTorch's derivative formulas (scatter of the incoming gradient by the returned indices).
#include "lowering/sorting.h"

#include "lowering/common.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {

Value sort_goes_first(FunctionBuilder& b, Value lhs, Value rhs, bool descending) {
  using shlo::CompareDirection;
  Value ordered = b.compare(lhs, rhs, descending ? CompareDirection::kGT : CompareDirection::kLT);
  if (!shlo::is_float(lhs.dtype())) return ordered;
  // NaN is the largest: ascending, a number goes before NaN; descending, NaN before a number.
  Value lhs_nan = b.compare(lhs, lhs, CompareDirection::kNE);
  Value rhs_nan = b.compare(rhs, rhs, CompareDirection::kNE);
  Value nan_first = descending
                        ? b.binary("stablehlo.and", lhs_nan, b.unary("stablehlo.not", rhs_nan))
                        : b.binary("stablehlo.and", b.unary("stablehlo.not", lhs_nan), rhs_nan);
  return b.binary("stablehlo.or", ordered, nan_first);
}

std::vector<Value> sort_with_indices(FunctionBuilder& b, Value x, int64_t dim, bool descending) {
  Value idx = b.iota(x.type.with_dtype(ElementType::kS64), dim);
  return b.sort(
      {x, idx}, dim, /*is_stable=*/true,
      [descending](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
        return {sort_goes_first(rb, a[0], a[1], descending)};
      });
}

std::vector<Value> compact_selected(FunctionBuilder& b, Value key,
                                    const std::vector<Value>& payload) {
  std::vector<Value> operands{key};
  operands.insert(operands.end(), payload.begin(), payload.end());
  std::vector<Value> sorted =
      b.sort(operands, 0, /*is_stable=*/true,
             [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
               return {rb.compare(a[0], a[1], shlo::CompareDirection::kGT)};  // true > false
             });
  return std::vector<Value>(sorted.begin() + 1, sorted.end());
}

Value prefix_sum(FunctionBuilder& b, Value x) {
  int64_t n = x.shape().at(0);
  if (n <= 1) return x;
  return shlo::reduce_window(b, {x}, {b.constant(0, TensorType(x.dtype(), {}))},
                             scan_window(1, 0, n), add_region)[0];
}

namespace {

// Sorts along `dim` (rank 0 is treated as one element), then keeps [start, start + len).
std::vector<Value> sorted_slice(LoweringContext& ctx, Value x, int64_t dim, bool descending,
                                int64_t start, int64_t len) {
  auto& b = ctx.b;
  const TensorType& vt = ctx.out_type(0);
  const TensorType& it = ctx.out_type(1);
  if (x.type.numel() == 0 || vt.numel() == 0) {
    return {b.constant(0, vt), b.constant_int(0, it)};
  }
  if (x.rank() == 0) x = b.reshape(x, {1});
  dim = wrap_dim(dim, x.rank());
  std::vector<Value> r = sort_with_indices(b, x, dim, descending);
  if (start != 0 || len != x.shape()[static_cast<size_t>(dim)]) {
    std::vector<int64_t> lo(static_cast<size_t>(x.rank()), 0), hi = x.shape(),
                                                               st(static_cast<size_t>(x.rank()), 1);
    lo[static_cast<size_t>(dim)] = start;
    hi[static_cast<size_t>(dim)] = start + len;
    for (Value& v : r) v = b.slice(v, lo, hi, st);
  }
  return {b.reshape(r[0], vt.shape), b.reshape(r[1], it.shape)};
}

int64_t wrapped(LoweringContext& ctx, int64_t dim) {
  int64_t rank = ctx.tensor(0).rank();
  return wrap_dim(dim, rank == 0 ? 1 : rank);
}

std::vector<Value> lower_sort(LoweringContext& ctx) {
  // sort(self, dim, descending) and sort.stable(self, *, stable, dim, descending): always
  // stable, which is a valid answer for stable=False too.
  Value x = ctx.tensor(0);
  int64_t dim = ctx.int_arg(ctx.index_of("dim"));
  bool descending = ctx.bool_arg(ctx.index_of("descending"));
  int64_t d = wrapped(ctx, dim);
  int64_t n = x.rank() == 0 ? 1 : x.shape()[static_cast<size_t>(d)];
  return sorted_slice(ctx, x, d, descending, 0, n);
}

std::vector<Value> lower_topk(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t k = ctx.int_arg(1);
  int64_t d = wrapped(ctx, ctx.int_arg(2));
  bool largest = ctx.bool_arg(3);
  return sorted_slice(ctx, x, d, largest, 0, k);
}

std::vector<Value> lower_kthvalue(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t k = ctx.int_arg(1);
  int64_t d = wrapped(ctx, ctx.int_arg(2));
  return sorted_slice(ctx, x, d, /*descending=*/false, k - 1, 1);
}

TORCHTPU_LOWERING("aten::sort", lower_sort);
TORCHTPU_LOWERING("aten::sort.stable", lower_sort);
TORCHTPU_LOWERING("aten::topk", lower_topk);
TORCHTPU_LOWERING("aten::kthvalue", lower_kthvalue);

}  // namespace
}  // namespace torchtpu::lowering
