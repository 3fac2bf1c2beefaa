// Lowerings behind the ops whose output shape depends on data (nonzero, masked_select, unique,
// equal). Each such op runs as two cached programs: a *count* program whose 0-d result the
// host reads (the one sync), then a *static* program that takes that count as a structural
// size. The kernels that glue the two are in aten/data_dependent.cpp; everything here is
// ordinary static-shape lowering, also usable from compiled graphs. Compaction is a stable sort
// keyed on the selection predicate (selected first), which keeps the original order.
#include "lowering/lowering.h"
#include "lowering/sorting.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

Value flatten(FunctionBuilder& b, Value x) { return b.reshape(x, {x.type.numel()}); }

Value sum_all_i64(FunctionBuilder& b, Value pred) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < pred.rank(); ++i) dims.push_back(i);
  return b.reduce_simple(b.convert(pred, ElementType::kS64),
                         b.constant_int(0, TensorType(ElementType::kS64, {})), dims,
                         "stablehlo.add");
}

Value take_prefix(FunctionBuilder& b, Value v, int64_t size) {
  return b.slice(v, {0}, {size}, {1});
}

// count_nonzero(self, int[] dim) and count_nonzero(self, int? dim=None): the count program of
// nonzero and masked_select.
std::vector<Value> lower_count_nonzero(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims;
  if (ctx.is_none(1)) {
    for (int64_t i = 0; i < x.rank(); ++i) dims.push_back(i);
  } else {
    for (int64_t d : ctx.int_list(1)) dims.push_back(wrap_dim(d, x.rank() == 0 ? 1 : x.rank()));
    if (x.rank() == 0) dims.clear();
  }
  if (ctx.out_type().shape.empty()) {  // dim=[] reduces everything, as sum does
    dims.clear();
    for (int64_t i = 0; i < x.rank(); ++i) dims.push_back(i);
  }
  Value r =
      b.reduce_simple(b.convert(b.convert(x, ElementType::kPred), ElementType::kS64),
                      b.constant_int(0, TensorType(ElementType::kS64, {})), dims, "stablehlo.add");
  return {coerce(b, r, ctx.out_type())};
}

// nonzero_static(self, *, size, fill_value): the coordinates of the first `size` nonzero
// elements in row-major order, rows past the count filled with fill_value.
std::vector<Value> lower_nonzero_static(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t size = ctx.int_arg(1);
  int64_t fill = ctx.int_arg(2);
  const TensorType& out = ctx.out_type();
  int64_t n = x.type.numel();
  if (out.numel() == 0) return {b.constant_int(0, out)};
  if (n == 0) return {b.constant_int(fill, out)};
  Value flat = flatten(b, b.convert(x, ElementType::kPred));
  TensorType idx_n(ElementType::kS64, {n});
  Value idx = compact_selected(b, flat, {b.iota(idx_n, 0)})[0];
  if (size <= n) {
    idx = take_prefix(b, idx, size);
  } else {
    idx = b.pad(idx, b.constant_int(0, TensorType(ElementType::kS64, {})), {0}, {size - n}, {0});
  }
  TensorType idx_s(ElementType::kS64, {size});
  Value valid = b.compare(b.iota(idx_s, 0), b.broadcast_to(sum_all_i64(b, flat), {size}),
                          CompareDirection::kLT);
  Value fill_v = b.constant_int(fill, idx_s);
  std::vector<Value> cols;
  int64_t stride = n;
  for (int64_t d = 0; d < x.rank(); ++d) {
    int64_t extent = x.shape()[static_cast<size_t>(d)];
    stride /= extent;
    Value c = b.binary("stablehlo.divide", idx, b.constant_int(stride, idx_s));
    c = b.binary("stablehlo.remainder", c, b.constant_int(extent, idx_s));
    cols.push_back(b.reshape(b.select(valid, c, fill_v), {size, 1}));
  }
  return {b.concatenate(cols, 1)};
}

// torchtpu::masked_select_static(self, mask, size): the `size` selected elements of the
// broadcast pair, in row-major order.
std::vector<Value> lower_masked_select_static(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  Value m = ctx.tensor(1);
  const TensorType& out = ctx.out_type();
  if (out.numel() == 0) return {b.constant(0, out)};
  std::vector<int64_t> shape = x.rank() >= m.rank() ? x.shape() : m.shape();
  const std::vector<int64_t>& other = x.rank() >= m.rank() ? m.shape() : x.shape();
  size_t off = shape.size() - other.size();
  for (size_t i = 0; i < other.size(); ++i) {
    if (shape[off + i] == 1) shape[off + i] = other[i];
  }
  Value xb = flatten(b, b.broadcast_to(b.convert(x, out.dtype), shape));
  Value mb = flatten(b, b.broadcast_to(b.convert(m, ElementType::kPred), shape));
  Value v = compact_selected(b, mb, {xb})[0];
  return {take_prefix(b, v, out.shape[0])};
}

// Sorted (or, for unique_consecutive, original-order) flat values and the "starts a new run"
// predicate over them.
struct Runs {
  Value values;
  std::optional<Value> perm;  // sorted position -> flat input position (sorted case only)
  Value is_new;
};

Runs runs(FunctionBuilder& b, Value x, bool consecutive) {
  Runs r;
  Value flat = flatten(b, x);
  int64_t n = flat.shape()[0];
  if (consecutive) {
    r.values = flat;
  } else {
    std::vector<Value> s = sort_with_indices(b, flat, 0, /*descending=*/false);
    r.values = s[0];
    r.perm = s[1];
  }
  Value first = b.constant(1, TensorType(ElementType::kPred, {1}));
  if (n == 1) {
    r.is_new = first;
  } else {
    // NaN != NaN: every NaN is its own value, as on the CPU.
    Value diff = b.compare(b.slice(r.values, {1}, {n}, {1}), b.slice(r.values, {0}, {n - 1}, {1}),
                           CompareDirection::kNE);
    r.is_new = b.concatenate({first, diff}, 0);
  }
  return r;
}

// torchtpu::unique_count(self, consecutive): the number of distinct values (or runs).
std::vector<Value> lower_unique_count(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  if (x.type.numel() == 0) return {b.constant_int(0, ctx.out_type())};
  return {sum_all_i64(b, runs(b, x, ctx.bool_arg(1)).is_new)};
}

// torchtpu::unique_static(self, size, consecutive, return_inverse, return_counts)
//   -> (values[size], inverse[self.shape] or [0], counts[size] or [0])
std::vector<Value> lower_unique_static(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t size = ctx.int_arg(1);
  bool consecutive = ctx.bool_arg(2);
  bool want_inverse = ctx.bool_arg(3);
  bool want_counts = ctx.bool_arg(4);
  int64_t n = x.type.numel();
  if (n == 0 || size == 0) {
    return {b.constant(0, ctx.out_type(0)), b.constant_int(0, ctx.out_type(1)),
            b.constant_int(0, ctx.out_type(2))};
  }
  Runs r = runs(b, x, consecutive);
  TensorType idx_n(ElementType::kS64, {n});
  std::vector<Value> packed = compact_selected(b, r.is_new, {r.values, b.iota(idx_n, 0)});
  Value values = take_prefix(b, packed[0], size);
  Value inverse = b.constant_int(0, ctx.out_type(1));
  if (want_inverse) {
    Value group =
        b.sub(prefix_sum(b, b.convert(r.is_new, ElementType::kS64)), b.constant_int(1, idx_n));
    if (r.perm) {
      // Back to input order: sort the group ids by the input position they came from.
      group = b.sort({*r.perm, group}, 0, /*is_stable=*/false,
                     [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
                       return {rb.compare(a[0], a[1], CompareDirection::kLT)};
                     })[1];
    }
    inverse = b.reshape(group, ctx.out_type(1).shape);
  }
  Value counts = b.constant_int(0, ctx.out_type(2));
  if (want_counts) {
    Value starts = take_prefix(b, packed[1], size);
    Value ends = b.concatenate(
        {b.slice(starts, {1}, {size}, {1}), b.constant_int(n, TensorType(ElementType::kS64, {1}))},
        0);
    counts = b.sub(ends, starts);
  }
  return {values, inverse, counts};
}

// ---- unique over slices along `dim` (unique_dim, unique_dim_consecutive) ----

// The slices as rows: column k of the (M, K) matrix is key k of a lexicographic compare.
struct RowRuns {
  std::vector<Value> cols;           // K rank-1 (M) columns, sorted when not consecutive
  std::optional<Value> perm;         // sorted row -> input row
  Value is_new;                      // (M) i1: the row differs from the previous one
  std::vector<int64_t> moved_shape;  // the input with `dim` moved first
};

RowRuns row_runs(FunctionBuilder& b, Value x, int64_t dim, bool consecutive) {
  RowRuns r;
  std::vector<int64_t> perm{dim};
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) perm.push_back(i);
  }
  Value moved = b.transpose(x, perm);
  r.moved_shape = moved.shape();
  int64_t m = r.moved_shape[0];
  int64_t k = x.type.numel() / m;
  Value rows = b.reshape(moved, {m, k});
  for (int64_t j = 0; j < k; ++j) {
    r.cols.push_back(b.reshape(b.slice(rows, {0, j}, {m, j + 1}, {1, 1}), {m}));
  }
  if (!consecutive) {
    std::vector<Value> operands = r.cols;
    operands.push_back(b.iota(TensorType(ElementType::kS64, {m}), 0));
    std::vector<Value> sorted =
        b.sort(operands, 0, /*is_stable=*/true,
               [k](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
                 // lhs < rhs lexicographically, built from the last key back.
                 Value lt = rb.compare(a[2 * (k - 1)], a[2 * (k - 1) + 1], CompareDirection::kLT);
                 for (int64_t j = k - 2; j >= 0; --j) {
                   Value l = a[2 * j], rr = a[2 * j + 1];
                   lt = rb.binary(
                       "stablehlo.or", rb.compare(l, rr, CompareDirection::kLT),
                       rb.binary("stablehlo.and", rb.compare(l, rr, CompareDirection::kEQ), lt));
                 }
                 return {lt};
               });
    r.perm = sorted.back();
    sorted.pop_back();
    r.cols = sorted;
  }
  Value first = b.constant(1, TensorType(ElementType::kPred, {1}));
  if (m == 1) {
    r.is_new = first;
  } else {
    std::optional<Value> diff;
    for (const Value& c : r.cols) {
      Value d = b.compare(b.slice(c, {1}, {m}, {1}), b.slice(c, {0}, {m - 1}, {1}),
                          CompareDirection::kNE);
      diff = diff ? b.binary("stablehlo.or", *diff, d) : d;
    }
    r.is_new = b.concatenate({first, *diff}, 0);
  }
  return r;
}

// torchtpu::unique_dim_count(self, dim, consecutive)
std::vector<Value> lower_unique_dim_count(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  if (x.type.numel() == 0) return {b.constant_int(0, ctx.out_type())};
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
  return {sum_all_i64(b, row_runs(b, x, dim, ctx.bool_arg(2)).is_new)};
}

// torchtpu::unique_dim_static(self, dim, size, consecutive)
//   -> (values: self with dim of `size`, inverse[M], counts[size])
std::vector<Value> lower_unique_dim_static(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
  int64_t size = ctx.int_arg(2);
  if (x.type.numel() == 0 || size == 0) {
    return {b.constant(0, ctx.out_type(0)), b.constant_int(0, ctx.out_type(1)),
            b.constant_int(0, ctx.out_type(2))};
  }
  RowRuns r = row_runs(b, x, dim, ctx.bool_arg(3));
  int64_t m = r.moved_shape[0];
  TensorType idx_m(ElementType::kS64, {m});
  std::vector<Value> payload = r.cols;
  payload.push_back(b.iota(idx_m, 0));
  std::vector<Value> packed = compact_selected(b, r.is_new, payload);
  std::vector<Value> cols;
  for (size_t j = 0; j < r.cols.size(); ++j) {
    cols.push_back(b.reshape(take_prefix(b, packed[j], size), {size, 1}));
  }
  std::vector<int64_t> moved = r.moved_shape;
  moved[0] = size;
  Value values = b.reshape(cols.size() == 1 ? cols[0] : b.concatenate(cols, 1), moved);
  std::vector<int64_t> back(static_cast<size_t>(x.rank()));
  for (int64_t i = 0, src = 1; i < x.rank(); ++i)
    back[static_cast<size_t>(i)] = i == dim ? 0 : src++;
  values = b.transpose(values, back);
  Value group =
      b.sub(prefix_sum(b, b.convert(r.is_new, ElementType::kS64)), b.constant_int(1, idx_m));
  if (r.perm) {
    group = b.sort({*r.perm, group}, 0, /*is_stable=*/false,
                   [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
                     return {rb.compare(a[0], a[1], CompareDirection::kLT)};
                   })[1];
  }
  Value starts = take_prefix(b, packed.back(), size);
  Value ends = b.concatenate(
      {b.slice(starts, {1}, {size}, {1}), b.constant_int(m, TensorType(ElementType::kS64, {1}))},
      0);
  return {values, group, b.sub(ends, starts)};
}

// torchtpu::all_equal(self, other) -> 0-d bool: aten::equal's program (same shapes).
std::vector<Value> lower_all_equal(LoweringContext& ctx) {
  auto& b = ctx.b;
  ElementType t = to_element_type(ctx.promoted_type({0, 1}));
  Value x = b.convert(ctx.tensor(0), t);
  Value y = b.convert(ctx.tensor(1), t);
  if (x.type.numel() == 0) return {b.constant(1, ctx.out_type())};
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.rank(); ++i) dims.push_back(i);
  Value eq = b.compare(x, y, CompareDirection::kEQ);
  return {b.reduce_simple(eq, b.constant(1, TensorType(ElementType::kPred, {})), dims,
                          "stablehlo.and")};
}

TORCHTPU_LOWERING("aten::count_nonzero.dim_IntList", lower_count_nonzero);
TORCHTPU_LOWERING("aten::count_nonzero", lower_count_nonzero);
TORCHTPU_LOWERING("aten::nonzero_static", lower_nonzero_static);
TORCHTPU_LOWERING("torchtpu::masked_select_static", lower_masked_select_static, kComplex);
TORCHTPU_LOWERING("torchtpu::unique_count", lower_unique_count);
TORCHTPU_LOWERING("torchtpu::unique_static", lower_unique_static);
TORCHTPU_LOWERING("torchtpu::unique_dim_count", lower_unique_dim_count);
TORCHTPU_LOWERING("torchtpu::unique_dim_static", lower_unique_dim_static);
TORCHTPU_LOWERING("torchtpu::all_equal", lower_all_equal, kComplex);

}  // namespace
}  // namespace torchtpu::lowering
