// Order statistics and searches built on the sort family: median, nanmedian, mode,
// searchsorted, bucketize, isin, and the static half of repeat_interleave (its count program and
// host sync are in aten/data_dependent.cpp). Selections by a computed position are gathers.
#include <algorithm>
#include <string>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/sorting.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {

namespace {

using shlo::CompareDirection;

TensorType s64(std::vector<int64_t> shape) { return TensorType(ElementType::kS64, shape); }

// `x` with `dim` moved last, as a (rows, n) matrix; rank 0 is one row of one element.
Value rows_along(FunctionBuilder& b, Value x, int64_t dim) {
  if (x.rank() == 0) return b.reshape(x, {1, 1});
  std::vector<int64_t> perm;
  int64_t rows = 1;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i == dim) continue;
    perm.push_back(i);
    rows *= x.shape()[static_cast<size_t>(i)];
  }
  perm.push_back(dim);
  return b.reshape(b.transpose(x, perm), {rows, x.shape()[static_cast<size_t>(dim)]});
}

// out[r, j] = x[r, pos[r, j]] for x (R, n) and int64 pos (R, m) with 0 <= pos < n: a gather
// from the flattened x at r * n + pos (exact for every value, NaN payloads and -0.0 included).
Value pick(FunctionBuilder& b, Value x, Value pos) {
  int64_t r = x.shape()[0], n = x.shape()[1], m = pos.shape()[1];
  TensorType idx_t(ElementType::kS64, {r, m});
  Value flat_idx = b.add(pos, b.mul(b.iota(idx_t, 0), b.constant_int(n, idx_t)));
  Value out = b.gather(b.reshape(x, {r * n}), b.reshape(flat_idx, {r * m, 1}), {{}, {0}, {0}, 1},
                       {1}, x.type.with_shape({r * m}));
  return b.reshape(out, {r, m});
}

Value sum_dim1(FunctionBuilder& b, Value v) {
  return b.reduce_simple(v, b.constant_int(0, TensorType(v.dtype(), {})), {1}, "stablehlo.add");
}

// ---- median / nanmedian ----

// median(self) / median.dim(self, dim, keepdim) and the nanmedian forms. The CPU's answer: the
// lower median ((n - 1) / 2 in sorted order); median returns the first NaN of the slice (value
// and index) if it has any; nanmedian takes the lower median of the non-NaN values (NaN when all
// are NaN).
std::vector<Value> lower_median_impl(LoweringContext& ctx, bool ignore_nan, bool with_dim) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  const char* name = ignore_nan ? "nanmedian" : "median";
  Value rows;
  if (with_dim) {
    int64_t dim = wrap_dim(ctx.int_arg(1), x.rank() == 0 ? 1 : x.rank());
    rows = rows_along(b, x, x.rank() == 0 ? 0 : dim);
  } else {
    rows = b.reshape(x, {1, x.type.numel()});
  }
  int64_t r = rows.shape()[0], n = rows.shape()[1];
  if (!with_dim && n == 0) return {full_like_type(b, NAN, ctx.out_type(0))};
  TORCH_CHECK(n > 0 || r == 0, name, "(): Expected reduction dim to have non-zero size.");
  if (r == 0) {
    std::vector<Value> out;
    for (size_t i = 0; i < ctx.out_types().size(); ++i) {
      out.push_back(b.constant_int(0, ctx.out_type(i)));
    }
    return out;
  }
  std::vector<Value> s = sort_with_indices(b, rows, 1, /*descending=*/false);
  Value num_nan = b.constant_int(0, s64({r}));
  if (shlo::is_float(rows.dtype())) {
    num_nan =
        sum_dim1(b, b.convert(b.compare(rows, rows, CompareDirection::kNE), ElementType::kS64));
  }
  Value nv = b.constant_int(n, s64({r}));
  Value one = b.constant_int(1, s64({r}));
  Value two = b.constant_int(2, s64({r}));
  Value k;
  if (ignore_nan) {
    Value valid = b.max(b.sub(b.sub(nv, num_nan), one), b.constant_int(0, s64({r})));
    k = b.div(valid, two);
  } else {
    Value has_nan = b.compare(num_nan, b.constant_int(0, s64({r})), CompareDirection::kGT);
    k = b.select(has_nan, b.sub(nv, num_nan), b.constant_int((n - 1) / 2, s64({r})));
  }
  k = b.reshape(k, {r, 1});
  std::vector<Value> out{b.reshape(pick(b, s[0], k), ctx.out_type(0).shape)};
  if (with_dim) out.push_back(b.reshape(pick(b, s[1], k), ctx.out_type(1).shape));
  return out;
}

std::vector<Value> lower_median(LoweringContext& ctx) {
  return lower_median_impl(ctx, false, false);
}
std::vector<Value> lower_median_dim(LoweringContext& ctx) {
  return lower_median_impl(ctx, false, true);
}
std::vector<Value> lower_nanmedian(LoweringContext& ctx) {
  return lower_median_impl(ctx, true, false);
}
std::vector<Value> lower_nanmedian_dim(LoweringContext& ctx) {
  return lower_median_impl(ctx, true, true);
}

// ---- mode ----

// mode(self, dim, keepdim): the CPU sorts each slice by value and keeps the run of equal values
// with the highest count, the first such (so the smallest value) on ties; its index is that of
// the run's last element in the sorted order (the largest input index, since the CPU's sort
// of the small slices it is tested on is stable).
std::vector<Value> lower_mode(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank() == 0 ? 1 : x.rank());
  Value rows = rows_along(b, x, x.rank() == 0 ? 0 : dim);
  int64_t r = rows.shape()[0], n = rows.shape()[1];
  TORCH_CHECK(n > 0 || r == 0, "mode(): Expected reduction dim ", dim, " to have non-zero size.");
  if (r == 0) return {b.constant_int(0, ctx.out_type(0)), b.constant_int(0, ctx.out_type(1))};
  std::vector<Value> s = sort_with_indices(b, rows, 1, /*descending=*/false);
  Value v = s[0];
  TensorType pred1(ElementType::kPred, {r, 1});
  Value is_new = b.constant(1, pred1);
  Value is_end = b.constant(1, pred1);
  if (n > 1) {
    Value diff = b.compare(b.slice(v, {0, 1}, {r, n}, {1, 1}),
                           b.slice(v, {0, 0}, {r, n - 1}, {1, 1}), CompareDirection::kNE);
    is_new = b.concatenate({is_new, diff}, 1);
    is_end = b.concatenate({diff, is_end}, 1);
  }
  Value iota = b.iota(s64({r, n}), 1);
  Value zero = b.constant_int(0, s64({r, n}));
  // Start of each element's run: a running max of the run-start positions.
  Value start = b.select(is_new, iota, zero);
  if (n > 1) {
    start = shlo::reduce_window(
        b, {start}, {b.constant_int(0, TensorType(ElementType::kS64, {}))}, scan_window(2, 1, n),
        [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
          return {rb.max(a[0], a[1])};
        })[0];
  }
  Value freq = b.add(b.sub(iota, start), b.constant_int(1, s64({r, n})));
  Value score = b.select(is_end, freq, zero);
  Value best = b.reduce_simple(score, b.constant_int(0, s64({})), {1}, "stablehlo.maximum");
  Value is_best = b.compare(score, b.broadcast_in_dim(best, {r, n}, {0}), CompareDirection::kEQ);
  Value pos = b.reduce_simple(b.select(is_best, iota, b.constant_int(n, s64({r, n}))),
                              b.constant_int(n, s64({})), {1}, "stablehlo.minimum");
  pos = b.reshape(pos, {r, 1});
  return {b.reshape(pick(b, v, pos), ctx.out_type(0).shape),
          b.reshape(pick(b, s[1], pos), ctx.out_type(1).shape)};
}

// ---- searchsorted / bucketize ----

// seq: the sorted sequence tensor arg; vals: the searched values (tensor or Scalar arg).
std::vector<Value> search_impl(LoweringContext& ctx, size_t seq_i, size_t val_i, bool right,
                               std::optional<size_t> sorter_i) {
  auto& b = ctx.b;
  ElementType t = to_element_type(ctx.promoted_type({seq_i, val_i}));
  Value seq = b.convert(ctx.tensor(seq_i), t);
  Value vals = ctx.operand(val_i, t);
  const TensorType& out = ctx.out_type();
  if (out.numel() == 0) return {b.constant_int(0, out)};
  int64_t n = seq.rank() == 0 ? 1 : seq.shape().back();
  Value seq2, vals2;
  if (seq.rank() <= 1) {
    seq2 = b.reshape(seq, {1, n});
    vals2 = b.reshape(vals, {1, vals.type.numel()});
  } else {
    int64_t rows = seq.type.numel() / std::max<int64_t>(n, 1);
    if (n == 0) rows = out.numel() / std::max<int64_t>(vals.shape().back(), 1);
    seq2 = b.reshape(seq, {rows, n});
    vals2 = b.reshape(vals, {rows, vals.shape().back()});
  }
  if (sorter_i && n > 0) {
    Value sorter = b.convert(ctx.tensor(*sorter_i), ElementType::kS64);
    seq2 = pick(b, seq2, b.reshape(sorter, seq2.shape()));
  }
  return {coerce(b, b.reshape(binary_search(b, seq2, vals2, right), out.shape), out)};
}

// The CPU's searchsorted_pre_check (ATen/native/BucketizationUtils.h) on shapes: the search
// below reads the last dim of both operands, so a shape the CPU refuses must not reach it (a 0-d
// value against a 2-D sequence read past the end of its shape).
void check_search_shapes(const Value& seq, const Value& vals) {
  TORCH_CHECK(vals.rank() > 0 || seq.rank() == 1,
              "torch.searchsorted(): input value can be a scalar only when boundaries tensor "
              "dimension is 1, but we got boundaries tensor dim(",
              seq.rank(), ") and input value's dim(", vals.rank(), ") numel(", vals.type.numel(),
              ")");
  TORCH_CHECK(seq.rank() != 0,
              "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
              "dimension");
  const auto& ss = seq.shape();
  const auto& vs = vals.shape();
  TORCH_CHECK(seq.rank() == 1 ||
                  (ss.size() == vs.size() && std::equal(ss.begin(), ss.end() - 1, vs.begin())),
              "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
              "dimensions of boundaries tensor and input value tensor must match, but we got "
              "boundaries tensor ",
              c10::IntArrayRef(ss), " and input value tensor ", c10::IntArrayRef(vs));
}

// searchsorted(sorted_sequence, self, *, out_int32, right, side, sorter), .Tensor and .Scalar.
std::vector<Value> lower_searchsorted(LoweringContext& ctx) {
  check_search_shapes(ctx.tensor(0), ctx.operand(1, ctx.tensor(0).dtype()));
  bool right = ctx.bool_arg(ctx.index_of("right"));
  size_t side = ctx.index_of("side");
  if (!ctx.is_none(side)) right = ctx.arg(side).ivalue.toStringRef() == "right";
  size_t sorter = ctx.index_of("sorter");
  return search_impl(ctx, 0, 1, right,
                     ctx.is_none(sorter) ? std::nullopt : std::optional<size_t>(sorter));
}

// bucketize(self, boundaries, *, out_int32, right), .Tensor and .Scalar: searchsorted with the
// arguments swapped.
std::vector<Value> lower_bucketize(LoweringContext& ctx) {
  // As the CPU's bucketize: unlike searchsorted, the boundaries are one sorted list.
  TORCH_CHECK(ctx.tensor(1).rank() == 1, "boundaries tensor must be 1 dimension, but got dim(",
              ctx.tensor(1).rank(), ")");
  return search_impl(ctx, 1, 0, ctx.bool_arg(ctx.index_of("right")), std::nullopt);
}

// ---- isin ----

// isin(elements, test_elements, *, assume_unique, invert) in its three overloads: an all-pairs
// equality in the promoted dtype (NaN is in nothing).
std::vector<Value> lower_isin(LoweringContext& ctx) {
  auto& b = ctx.b;
  ElementType t = to_element_type(ctx.promoted_type({0, 1}));
  Value e = ctx.operand(0, t);
  Value te = ctx.operand(1, t);
  bool invert = ctx.bool_arg(ctx.index_of("invert"));
  const TensorType& out = ctx.out_type();
  int64_t ne = e.type.numel(), nt = te.type.numel();
  if (ne == 0) return {b.constant(0, out)};
  if (nt == 0) return {b.constant(invert ? 1 : 0, out)};
  Value any;
  if (ne * nt <= (int64_t{1} << 20)) {
    std::vector<int64_t> shape{ne, nt};
    Value eq =
        b.compare(b.broadcast_in_dim(b.reshape(e, {ne}), shape, {0}),
                  b.broadcast_in_dim(b.reshape(te, {nt}), shape, {1}), CompareDirection::kEQ);
    any =
        b.reduce_simple(eq, b.constant(0, TensorType(ElementType::kPred, {})), {1}, "stablehlo.or");
  } else {
    // Large: sort the test elements, binary-search each element, compare with what is there.
    // NaNs (sorted last) search as +inf, so the search's predicate stays monotone; they never
    // compare equal, and a real +inf sorts before them.
    Value sorted = sort_with_indices(b, b.reshape(te, {1, nt}), 1, /*descending=*/false)[0];
    Value keys = sorted;
    if (shlo::is_float(t)) {
      TensorType st(t, {1, nt});
      keys = b.select(b.compare(sorted, sorted, CompareDirection::kNE),
                      full_like_type(b, INFINITY, st), sorted);
    }
    Value vals = b.reshape(e, {1, ne});
    Value pos = binary_search(b, keys, vals, /*right=*/false);
    pos = b.min(pos, b.constant_int(nt - 1, s64({1, ne})));
    any = b.reshape(b.compare(pick(b, sorted, pos), vals, CompareDirection::kEQ), {ne});
  }
  if (invert) any = b.unary("stablehlo.not", any);
  return {b.reshape(any, out.shape)};
}

// ---- repeat_interleave ----

// torchtpu::repeat_interleave_static(repeats, size): for output position j, the i whose
// repeats cover it, i.e. how many inclusive prefix sums of `repeats` are <= j.
std::vector<Value> lower_repeat_interleave_static(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value rep = b.convert(ctx.tensor(0), ElementType::kS64);
  const TensorType& out = ctx.out_type();
  int64_t size = out.numel(), n = rep.type.numel();
  if (size == 0 || n == 0) return {b.constant_int(0, out)};
  Value cum = prefix_sum(b, b.reshape(rep, {n}));
  // How many prefix sums are <= j: the upper bound of j (the sums never decrease).
  Value j = b.iota(s64({1, size}), 1);
  Value idx = b.reshape(binary_search(b, b.reshape(cum, {1, n}), j, /*right=*/true), {size});
  return {coerce(b, b.min(idx, b.constant_int(n - 1, s64({size}))), out)};
}

// torchtpu::repeat_interleave_count(repeats): sum(repeats), or -1 when one is negative.
std::vector<Value> lower_repeat_interleave_count(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value rep = b.convert(ctx.tensor(0), ElementType::kS64);
  int64_t n = rep.type.numel();
  if (n == 0) return {b.constant_int(0, ctx.out_type())};
  rep = b.reshape(rep, {n});
  Value total = b.reduce_simple(rep, b.constant_int(0, s64({})), {0}, "stablehlo.add");
  Value low = b.reduce_simple(rep, b.constant_int(0, s64({})), {0}, "stablehlo.minimum");
  Value neg = b.compare(low, b.constant_int(0, s64({})), CompareDirection::kLT);
  return {b.select(neg, b.constant_int(-1, s64({})), total)};
}

TORCHTPU_LOWERING("aten::median", lower_median);
TORCHTPU_LOWERING("aten::median.dim", lower_median_dim);
TORCHTPU_LOWERING("aten::nanmedian", lower_nanmedian);
TORCHTPU_LOWERING("aten::nanmedian.dim", lower_nanmedian_dim);
TORCHTPU_LOWERING("aten::mode", lower_mode);
TORCHTPU_LOWERING("aten::searchsorted.Tensor", lower_searchsorted);
TORCHTPU_LOWERING("aten::searchsorted.Scalar", lower_searchsorted);
TORCHTPU_LOWERING("aten::bucketize.Tensor", lower_bucketize);
TORCHTPU_LOWERING("aten::bucketize.Scalar", lower_bucketize);
TORCHTPU_LOWERING("aten::isin.Tensor_Tensor", lower_isin);
TORCHTPU_LOWERING("aten::isin.Tensor_Scalar", lower_isin);
TORCHTPU_LOWERING("aten::isin.Scalar_Tensor", lower_isin);
TORCHTPU_LOWERING("torchtpu::repeat_interleave_static", lower_repeat_interleave_static);
TORCHTPU_LOWERING("torchtpu::repeat_interleave_count", lower_repeat_interleave_count);

}  // namespace

// The CPU's binary search, unrolled: for each value, the first position in its (R, n) row of
// `seq` where `!(seq >= v)` (left) or `!(seq > v)` (right) stops holding. `vals` is (R, m).
Value binary_search(FunctionBuilder& b, Value seq, Value vals, bool right) {
  using shlo::CompareDirection;
  auto s64 = [](std::vector<int64_t> shape) { return TensorType(ElementType::kS64, shape); };
  int64_t r = seq.shape()[0], n = seq.shape()[1], m = vals.shape()[1];
  std::vector<int64_t> shape{r, m};
  Value lo = b.constant_int(0, s64(shape));
  Value hi = b.constant_int(n, s64(shape));
  if (n == 0) return lo;
  Value one = b.constant_int(1, s64(shape));
  Value last = b.constant_int(n - 1, s64(shape));
  for (int64_t s = n; s > 0; s >>= 1) {  // bit_length(n) halvings empty every interval
    Value active = b.compare(lo, hi, CompareDirection::kLT);
    Value mid = b.add(lo, b.binary("stablehlo.shift_right_logical", b.sub(hi, lo), one));
    Value mv = pick(b, seq, b.min(mid, last));
    Value go_right =
        b.unary("stablehlo.not",
                b.compare(mv, vals, right ? CompareDirection::kGT : CompareDirection::kGE));
    Value inc = b.binary("stablehlo.and", active, go_right);
    Value dec = b.binary("stablehlo.and", active, b.unary("stablehlo.not", go_right));
    lo = b.select(inc, b.add(mid, one), lo);
    hi = b.select(dec, mid, hi);
  }
  return lo;
}

}  // namespace torchtpu::lowering
