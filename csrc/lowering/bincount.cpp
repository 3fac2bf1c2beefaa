// The two programs behind torch.bincount (the kernel that runs them, with the one sync between,
// is aten/bincount.cpp): torchtpu::bincount_max sizes the result, torchtpu::bincount_static
// counts (or sums weights) with a scatter-add, in input order as the CPU's loop adds.
#include <limits>

#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// bincount_max(self (N,), N > 0) -> int64 0-d: max(self), or -1 when any element is negative
// (the CPU's "non-negative inputs" error; one value so the host reads once).
std::vector<Value> lower_bincount_max(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = b.convert(ctx.tensor(0), ElementType::kS64);
  TensorType s64(ElementType::kS64, {});
  int64_t n = x.type.numel();
  x = b.reshape(x, {n});
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
  int64_t size = out.numel();
  if (n == 0 || size == 0) return {zeros(b, out)};
  Value idx = b.reshape(b.convert(x, ElementType::kS64), {n, 1});
  Value upd = ctx.is_none(1) ? b.constant_int(1, TensorType(out.dtype, {n}))
                             : b.reshape(b.convert(ctx.tensor(1), out.dtype), {n});
  TensorType sc(out.dtype, {});
  Value r = b.op_multi(
      "stablehlo.scatter", {zeros(b, out), idx, upd}, {out},
      "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<"
      "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
      "unique_indices = false",
      {{{sc, sc}, [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
          return {rb.add(a[0], a[1])};
        }}})[0];
  return {r};
}

TORCHTPU_LOWERING("torchtpu::bincount_max", lower_bincount_max);
TORCHTPU_LOWERING("torchtpu::bincount_static", lower_bincount_static);

}  // namespace
}  // namespace torchtpu::lowering
