// Data-movement ops that reach the device as real kernels (cat, flip, roll, pad, gathers...)
// and the factories whose out= form fills a pre-sized tensor (arange, linspace, eye).
// Metadata-only views (view, expand, permute, alias) never get here: the runtime handles them.
#include <c10/util/Exception.h>

#include <algorithm>

#include "lowering/checks.h"
#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/numbers.h"
#include "lowering/scalar_fits.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// ---- cat / stack ----

std::vector<Value> lower_cat(LoweringContext& ctx) {
  const TensorType& out = ctx.out_type();
  int64_t dim = wrap_dim(ctx.int_arg(1), out.rank());
  std::vector<Value> parts;
  for (const Value& v : ctx.tensor_list(0)) {
    // Empty inputs add nothing; this also drops the legacy 1-D empty tensors that cat accepts
    // with any rank.
    if (v.type.numel() == 0) continue;
    parts.push_back(ctx.b.convert(v, out.dtype));
  }
  if (parts.empty()) return {zeros(ctx.b, out)};
  return {ctx.b.concatenate(parts, dim)};
}

std::vector<Value> lower_stack(LoweringContext& ctx) {
  const TensorType& out = ctx.out_type();
  int64_t dim = wrap_dim(ctx.int_arg(1), out.rank());
  std::vector<Value> parts;
  for (const Value& v : ctx.tensor_list(0)) {
    std::vector<int64_t> shape = v.shape();
    shape.insert(shape.begin() + dim, 1);
    parts.push_back(ctx.b.reshape(ctx.b.convert(v, out.dtype), shape));
  }
  if (out.numel() == 0) return {zeros(ctx.b, out)};
  return {ctx.b.concatenate(parts, dim)};
}

// ---- copies and fills ----

std::vector<Value> lower_clone(LoweringContext& ctx) {
  return {coerce(ctx.b, ctx.tensor(0), ctx.out_type())};
}

std::vector<Value> lower_fill(LoweringContext& ctx) {
  check_scalar_arg_fits(ctx.arg(1), ctx.out_type().dtype, ctx.out_type().numel());
  return {coerce(ctx.b, ctx.tensor(1), ctx.out_type())};
}

std::vector<Value> lower_zero(LoweringContext& ctx) { return {zeros(ctx.b, ctx.out_type())}; }

// ---- reordering ----

std::vector<Value> lower_flip(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims;
  for (int64_t d : ctx.int_list(1)) {
    int64_t w = wrap_dim(d, x.rank());
    if (w < x.rank()) dims.push_back(w);
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (dims.empty()) return {x};
  return {shlo::reverse(ctx.b, x, dims)};
}

// Rotates `x` by `shift` along `dim`: the last `shift` elements move to the front.
Value roll_dim(FunctionBuilder& b, Value x, int64_t shift, int64_t dim) {
  int64_t n = x.shape()[static_cast<size_t>(dim)];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  std::vector<int64_t> start(static_cast<size_t>(x.rank()), 0),
      limit = x.shape(), strides(static_cast<size_t>(x.rank()), 1);
  std::vector<int64_t> tail_start = start, head_limit = limit;
  tail_start[static_cast<size_t>(dim)] = n - s;
  head_limit[static_cast<size_t>(dim)] = n - s;
  Value tail = b.slice(x, tail_start, limit, strides);
  Value head = b.slice(x, start, head_limit, strides);
  return b.concatenate({tail, head}, dim);
}

// Rotates `x` by a runtime `shift` (0-d s64) along `dim`: a window of n elements of x ++ x
// starting at n - (shift mod n), which lies in [1, n], so the dynamic slice is never clamped.
Value roll_dim_runtime(FunctionBuilder& b, Value x, Value shift, int64_t dim) {
  int64_t n = x.shape()[static_cast<size_t>(dim)];
  if (n == 0) return x;
  TensorType s64(ElementType::kS64, {});
  Value size = b.constant_int(n, s64);
  Value rem = b.binary("stablehlo.remainder", shift, size);  // sign of the shift
  Value s = b.binary("stablehlo.remainder", b.add(rem, size), size);
  Value start = b.sub(size, s);
  Value doubled = b.concatenate({x, x}, dim);
  std::vector<Value> starts;
  for (int64_t d = 0; d < x.rank(); ++d)
    starts.push_back(d == dim ? start : b.constant_int(0, s64));
  return shlo::dynamic_slice(b, doubled, starts, x.shape());
}

std::vector<Value> lower_roll(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims = ctx.int_list(2);
  // Eager shifts are runtime values (a new shift never recompiles); a graph's are literals.
  bool runtime = is_runtime_list(ctx, 1);
  size_t count = list_size(ctx, 1);
  auto roll = [&](Value v, size_t i, int64_t dim) {
    if (runtime) return roll_dim_runtime(b, v, list_element(ctx, 1, i), dim);
    return roll_dim(b, v, ctx.int_list(1)[i], dim);
  };
  if (dims.empty()) {
    // No dims: roll the flattened tensor, then restore the shape.
    TORCH_CHECK(count == 1, "torchtpu lowering: aten::roll without dims takes one shift");
    Value flat = b.reshape(x, {x.type.numel()});
    return {b.reshape(roll(flat, 0, 0), x.shape())};
  }
  TORCH_CHECK(count == dims.size(), "torchtpu lowering: aten::roll needs one shift per dim");
  for (size_t i = 0; i < dims.size(); ++i) x = roll(x, i, wrap_dim(dims[i], x.rank()));
  return {x};
}

// Tensor.unfold's backward: window i of grad_in (its trailing dim of `size`) lands on input
// positions [i * step, i * step + size) along `dim`, overlapping windows adding up. Element k
// of every window is one interior-padded (stride `step`) copy of grad_in[..., k]; summing the
// `size` copies is the scatter-add without a scatter. Non-overlapping windows (step >= size)
// are a single pad + reshape.
std::vector<Value> lower_unfold_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value g = ctx.tensor(0);
  TensorType out = ctx.out_type();
  std::vector<int64_t> in_shape = out.shape.empty() ? std::vector<int64_t>{1} : out.shape;
  int64_t rank = static_cast<int64_t>(in_shape.size());
  int64_t dim = wrap_dim(ctx.int_arg(2), rank);
  int64_t size = ctx.int_arg(3), step = ctx.int_arg(4);
  auto d = static_cast<size_t>(dim);
  // grad_in: in_shape with n windows at `dim`, plus the trailing window dim (a 0-d input
  // unfolds to a single window of size <= 1).
  if (out.shape.empty()) g = b.reshape(g, {1, size});
  std::vector<int64_t> g_shape = g.shape();
  std::vector<int64_t> win_shape(g_shape.begin(), g_shape.end() - 1);
  int64_t n = win_shape[d], len = in_shape[d];
  Value zero = b.constant(0.0, TensorType(out.dtype, {}));
  if (n == 0 || size == 0) return {full_like_type(b, 0.0, out)};
  std::vector<int64_t> zeros(static_cast<size_t>(rank), 0);
  if (step >= size) {
    // (..., n, ..., size) -> (..., n, size, ...) padded to (..., n, step, ...) -> n * step rows.
    std::vector<int64_t> perm;
    for (int64_t i = 0; i <= dim; ++i) perm.push_back(i);
    perm.push_back(rank);
    for (int64_t i = dim + 1; i < rank; ++i) perm.push_back(i);
    Value t = b.transpose(g, perm);
    std::vector<int64_t> lo(static_cast<size_t>(rank) + 1, 0), hi = lo;
    hi[d + 1] = step - size;
    t = b.pad(t, zero, lo, hi, lo);
    std::vector<int64_t> merged = in_shape;
    merged[d] = n * step;
    t = b.reshape(t, merged);
    std::vector<int64_t> plo = zeros, phi = zeros;
    phi[d] = len - n * step;  // negative (a slice) when the last gap runs past the end
    return {b.reshape(b.pad(t, zero, plo, phi, zeros), out.shape)};
  }
  // Overlaps add up to ceil(size / step) terms: half precision sums in float32, rounds once.
  ElementType acc = opmath_type(out.dtype);
  Value acc_zero = b.constant(0.0, TensorType(acc, {}));
  Value sum;
  std::vector<int64_t> start(g_shape.size(), 0), limit = g_shape, strides(g_shape.size(), 1);
  for (int64_t k = 0; k < size; ++k) {
    start.back() = k;
    limit.back() = k + 1;
    Value gk = b.reshape(b.slice(g, start, limit, strides), win_shape);
    std::vector<int64_t> lo = zeros, hi = zeros, interior = zeros;
    lo[d] = k;
    interior[d] = step - 1;
    hi[d] = len - (k + (n - 1) * step + 1);
    Value placed = b.pad(b.convert(gk, acc), acc_zero, lo, hi, interior);
    sum = k == 0 ? placed : b.add(sum, placed);
  }
  return {b.reshape(b.convert(sum, out.dtype), out.shape)};
}

LoweringFn triangle(bool lower) {
  return [lower](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    Value x = ctx.tensor(0);
    int64_t r = x.rank();
    TORCH_CHECK(r >= 2, "torchtpu lowering: ", lower ? "tril" : "triu",
                " needs a tensor of at least 2 dims");
    int64_t diagonal = ctx.int_arg(1);
    TensorType grid(ElementType::kS64, {x.shape()[r - 2], x.shape()[r - 1]});
    Value offset = b.sub(b.iota(grid, 1), b.iota(grid, 0));  // col - row
    Value keep = b.compare(offset, b.constant_int(diagonal, grid),
                           lower ? CompareDirection::kLE : CompareDirection::kGE);
    keep = b.broadcast_in_dim(keep, x.shape(), {r - 2, r - 1});
    return {b.select(keep, x, zeros(b, x.type))};
  };
}

std::vector<Value> lower_repeat(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  std::vector<int64_t> reps = ctx.int_list(1);
  if (out.numel() == 0) return {zeros(b, out)};
  size_t n = reps.size();
  std::vector<int64_t> shape(n - static_cast<size_t>(x.rank()), 1);
  shape.insert(shape.end(), x.shape().begin(), x.shape().end());
  x = b.reshape(x, shape);
  // [s0, s1, ...] -> [r0, s0, r1, s1, ...] -> [r0*s0, r1*s1, ...]
  std::vector<int64_t> tiled, dims;
  for (size_t i = 0; i < n; ++i) {
    tiled.push_back(reps[i]);
    tiled.push_back(shape[i]);
    dims.push_back(static_cast<int64_t>(2 * i + 1));
  }
  return {b.reshape(b.broadcast_in_dim(x, tiled, dims), out.shape)};
}

std::vector<Value> lower_constant_pad_nd(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<int64_t> pad = ctx.int_list(1);
  size_t r = static_cast<size_t>(x.rank());
  TORCH_CHECK(pad.size() % 2 == 0 && pad.size() / 2 <= r,
              "torchtpu lowering: constant_pad_nd: bad padding length ", pad.size());
  std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
  // pad lists (low, high) pairs starting from the last dim; negative entries crop.
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    low[r - 1 - i] = pad[2 * i];
    high[r - 1 - i] = pad[2 * i + 1];
  }
  Value value = b.convert(ctx.tensor(2), x.dtype());
  Value y = b.pad(x, value, low, high, interior);
  return {coerce(b, y, ctx.out_type())};
}

// ---- gathers ----

std::vector<Value> lower_index_select(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  Value index = ctx.tensor(2);
  int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(x.rank(), 1));
  check_indices(ctx, index, 0, x.rank() == 0 ? 1 : x.shape()[static_cast<size_t>(dim)],
                "index out of range in self");
  if (x.rank() == 0) return {b.reshape(x, out.shape)};
  int64_t k = index.type.numel();
  if (out.numel() == 0) return {zeros(b, out)};
  Value idx = b.reshape(b.convert(index, ElementType::kS64), {k, 1});
  std::vector<int64_t> offset_dims, slice_sizes = x.shape();
  slice_sizes[static_cast<size_t>(dim)] = 1;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) offset_dims.push_back(i);
  }
  return {b.gather(x, idx, {offset_dims, {dim}, {dim}, 1}, slice_sizes, out)};
}

// out[i][j][k] = self[i][index[i][j][k]][k] (dim = 1): every output element gathers a single
// element whose coordinates are its own, except along `dim` where the index says.
std::vector<Value> lower_gather(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  Value index = ctx.tensor(2);
  int64_t r = x.rank();
  int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(r, 1));
  check_dim_indices(ctx, index, dim, r == 0 ? 1 : x.shape()[static_cast<size_t>(dim)],
                    /*allow_negative=*/false, /*index_error=*/false);
  if (out.numel() == 0) return {zeros(b, out)};
  if (x.rank() == 0) return {b.reshape(x, out.shape)};
  std::vector<int64_t> coord_shape = index.shape();
  coord_shape.push_back(1);
  TensorType coord_t(ElementType::kS64, coord_shape);
  Value idx = b.reshape(b.convert(index, ElementType::kS64), coord_shape);
  std::vector<Value> coords;
  for (int64_t d = 0; d < r; ++d) coords.push_back(d == dim ? idx : b.iota(coord_t, d));
  Value all = b.concatenate(coords, r);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < r; ++d) dims.push_back(d);
  return {
      b.gather(x, all, {{}, dims, dims, r}, std::vector<int64_t>(static_cast<size_t>(r), 1), out)};
}

// ---- factories (out= forms: the out tensor is already sized) ----

// CPU computes arange in acc_type: double for float/double, float for half types, int64 for ints.
ElementType range_compute_type(ElementType out) {
  if (is_half(out)) return ElementType::kF32;
  if (shlo::is_float(out)) return ElementType::kF64;
  return ElementType::kS64;
}

Value arange(LoweringContext& ctx, std::optional<Value> start, Value end,
             std::optional<Value> step) {
  (void)end;  // the length is fixed by the out tensor's size
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  if (out.numel() == 0) return zeros(b, out);
  ElementType ct = range_compute_type(out.dtype);
  TensorType t(ct, out.shape);
  Value i = b.iota(t, 0);
  Value s0 = start ? coerce(b, *start, t) : b.constant(0, t);
  Value st = step ? coerce(b, *step, t) : b.constant(1, t);
  return b.convert(b.add(s0, b.mul(i, st)), out.dtype);
}

std::vector<Value> lower_arange_start_out(LoweringContext& ctx) {
  return {arange(ctx, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2))};
}

std::vector<Value> lower_arange_out(LoweringContext& ctx) {
  return {arange(ctx, std::nullopt, ctx.tensor(0), std::nullopt)};
}

// Mirrors CPU's linspace: the first half steps up from start, the second half steps down from
// end, so both endpoints are exact.
std::vector<Value> lower_linspace_out(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  int64_t steps = ctx.int_arg(2);
  if (out.numel() == 0) return {zeros(b, out)};
  // start/end are first cast to the out dtype; the step is double for integer outputs.
  ElementType ct = !shlo::is_float(out.dtype)       ? ElementType::kF64
                   : out.dtype == ElementType::kF64 ? ElementType::kF64
                                                    : ElementType::kF32;
  TensorType t(ct, out.shape);
  Value start = coerce(b, b.convert(ctx.tensor(0), out.dtype), t);
  if (steps == 1) return {b.convert(start, out.dtype)};
  Value end = coerce(b, b.convert(ctx.tensor(1), out.dtype), t);
  Value step = b.div(b.sub(end, start), b.constant(static_cast<double>(steps - 1), t));
  Value i = b.iota(t, 0);
  Value up = b.add(start, b.mul(step, i));
  Value down = b.sub(end, b.mul(step, b.sub(b.constant(static_cast<double>(steps - 1), t), i)));
  Value first_half =
      b.compare(i, b.constant(static_cast<double>(steps / 2), t), CompareDirection::kLT);
  return {b.convert(b.select(first_half, up, down), out.dtype)};
}

std::vector<Value> lower_eye_out(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  TORCH_CHECK(out.rank() == 2, "torchtpu lowering: eye.out expects a 2-d out tensor");
  if (out.numel() == 0) return {zeros(b, out)};
  TensorType grid(ElementType::kS64, out.shape);
  Value diag = b.compare(b.iota(grid, 0), b.iota(grid, 1), CompareDirection::kEQ);
  return {b.convert(diag, out.dtype)};
}

TORCHTPU_LOWERING("aten::cat", lower_cat, kComplex);
TORCHTPU_LOWERING("aten::stack", lower_stack, kComplex);
TORCHTPU_LOWERING("aten::clone", lower_clone, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::fill.Scalar", lower_fill, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::fill.Tensor", lower_fill, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::zero", lower_zero, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::flip", lower_flip, kComplex);
TORCHTPU_LOWERING("aten::roll", lower_roll, kComplex);
TORCHTPU_LOWERING("aten::unfold_backward", lower_unfold_backward);
TORCHTPU_LOWERING("aten::tril", triangle(true), kComplex);
TORCHTPU_LOWERING("aten::triu", triangle(false), kComplex);
TORCHTPU_LOWERING("aten::repeat", lower_repeat, kComplex);
TORCHTPU_LOWERING("aten::constant_pad_nd", lower_constant_pad_nd, kComplex);
TORCHTPU_LOWERING("aten::index_select", lower_index_select, kComplex);
TORCHTPU_LOWERING("aten::gather", lower_gather, kComplex);
TORCHTPU_LOWERING("aten::arange.start_out", lower_arange_start_out);
TORCHTPU_LOWERING("aten::arange.out", lower_arange_out);
TORCHTPU_LOWERING("aten::linspace.out", lower_linspace_out);
TORCHTPU_LOWERING("aten::eye.out", lower_eye_out);
TORCHTPU_LOWERING("aten::eye.m_out", lower_eye_out);

}  // namespace
}  // namespace torchtpu::lowering
