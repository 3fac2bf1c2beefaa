// Sorting building blocks shared by the sort family (sort, topk, kthvalue) and the
// data-dependent ops (nonzero, masked_select, unique), which compact with stable sorts.
#pragma once

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// The comparator PyTorch's sort uses: NaN sorts as the largest value (last ascending, first
// descending); -0.0 and 0.0 tie.
Value sort_goes_first(FunctionBuilder& b, Value lhs, Value rhs, bool descending);

// Stable sort of `x` along `dim` (`x` of rank >= 1): {values, int64 indices}.
std::vector<Value> sort_with_indices(FunctionBuilder& b, Value x, int64_t dim, bool descending);

// Stable sort of rank-1 `payload`s by the rank-1 i1 `key`, true first: compacts the selected
// elements to the front in their original order.
std::vector<Value> compact_selected(FunctionBuilder& b, Value key,
                                    const std::vector<Value>& payload);

// The CPU's searchsorted binary search, unrolled: for each value of the (R, m) `vals`, the first
// position in its (R, n) row of `seq` where `!(seq >= v)` (left) or `!(seq > v)` (right) stops
// holding, as int64 (R, m).
Value binary_search(FunctionBuilder& b, Value seq, Value vals, bool right);

// Inclusive prefix sum along dim 0 of a rank-1 tensor.
Value prefix_sum(FunctionBuilder& b, Value x);

}  // namespace torchtpu::lowering
