// View and copy ops as they appear inside compiled graphs. In eager mode views are metadata
// over shared storage and never reach a lowering; in a functional FX graph they are values,
// so they lower to reshape/transpose/broadcast/slice. Registered as graph-only entries.
#include <sstream>
#include <string>

#include "lowering/checks.h"
#include "lowering/lowering.h"
#include "lowering/numbers.h"
#include "lowering/scalar_fits.h"
#include "lowering/strided.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;)
    strides[i - 1] = strides[i] * std::max<int64_t>(sizes[i], 1);
  return strides;
}

std::vector<Value> reshape_to_out(LoweringContext& ctx) {
  return {ctx.b.reshape(ctx.tensor(0), ctx.out_type().shape)};
}

std::vector<Value> identity(LoweringContext& ctx) { return {ctx.tensor(0)}; }

std::vector<Value> expand(LoweringContext& ctx) {
  return {ctx.b.broadcast_to(ctx.tensor(0), ctx.out_type().shape)};
}

std::vector<Value> permute(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> perm = ctx.int_list(1);
  for (auto& p : perm) p = wrap_dim(p, x.rank());
  return {ctx.b.transpose(x, perm)};
}

std::vector<Value> transpose(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  if (x.rank() < 2) return {x};
  int64_t d0 = wrap_dim(ctx.int_arg(1), x.rank()), d1 = wrap_dim(ctx.int_arg(2), x.rank());
  std::vector<int64_t> perm(static_cast<size_t>(x.rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
  return {ctx.b.transpose(x, perm)};
}

std::vector<Value> t(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  return {x.rank() < 2 ? x : ctx.b.transpose(x, {1, 0})};
}

std::vector<Value> slice(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
  int64_t n = x.shape()[static_cast<size_t>(dim)];
  int64_t step = ctx.int_arg(4);
  auto clampi = [&](std::optional<int64_t> v, int64_t dflt) {
    int64_t i = v.value_or(dflt);
    if (i < 0) i += n;
    return std::min(std::max<int64_t>(i, 0), n);
  };
  int64_t start = clampi(ctx.optional_int(2), 0);
  int64_t end = std::max(clampi(ctx.optional_int(3), n), start);
  std::vector<int64_t> lo(static_cast<size_t>(x.rank()), 0), hi = x.shape(),
                                                             st(static_cast<size_t>(x.rank()), 1);
  lo[static_cast<size_t>(dim)] = start;
  hi[static_cast<size_t>(dim)] = end;
  st[static_cast<size_t>(dim)] = step;
  return {ctx.b.slice(x, lo, hi, st)};
}

// select with a runtime index (a compiled function's int argument, kept out of the program's
// signature): wrapped like a Python index, checked on the device as the CPU checks it, then a
// dynamic slice, which the check keeps from ever being clamped silently.
Value select_runtime(LoweringContext& ctx, Value x, int64_t dim) {
  FunctionBuilder& b = ctx.b;
  int64_t n = x.shape()[static_cast<size_t>(dim)];
  TensorType s64(ElementType::kS64, {});
  Value index = number(ctx, 2, ElementType::kS64);
  Value size = b.constant_int(n, s64);
  Value zero = b.constant_int(0, s64);
  Value wrapped =
      b.select(b.compare(index, zero, shlo::CompareDirection::kLT), b.add(index, size), index);
  Value ok = b.binary("stablehlo.and", b.compare(wrapped, zero, shlo::CompareDirection::kGE),
                      b.compare(wrapped, size, shlo::CompareDirection::kLT));
  std::ostringstream shape;
  shape << c10::IntArrayRef(x.shape());
  check(ctx, ok,
        "select(): index {} out of range for tensor of size " + shape.str() + " at dimension " +
            std::to_string(dim),
        /*index_error=*/true, index);
  std::vector<Value> starts;
  std::vector<int64_t> sizes = x.shape();
  sizes[static_cast<size_t>(dim)] = 1;
  for (int64_t d = 0; d < x.rank(); ++d) starts.push_back(d == dim ? wrapped : zero);
  return shlo::dynamic_slice(b, x, starts, sizes);
}

std::vector<Value> select(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
  if (ctx.arg(2).kind == LArg::Kind::kScalar) {
    return {ctx.b.reshape(select_runtime(ctx, x, dim), ctx.out_type().shape)};
  }
  int64_t index = ctx.int_arg(2);
  if (index < 0) index += x.shape()[static_cast<size_t>(dim)];
  std::vector<int64_t> lo(static_cast<size_t>(x.rank()), 0), hi = x.shape(),
                                                             st(static_cast<size_t>(x.rank()), 1);
  lo[static_cast<size_t>(dim)] = index;
  hi[static_cast<size_t>(dim)] = index + 1;
  return {ctx.b.reshape(ctx.b.slice(x, lo, hi, st), ctx.out_type().shape)};
}

// as_strided over the input's own elements, in row-major order (the functional meaning of
// as_strided on a contiguous graph value).
std::vector<Value> as_strided(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  StridedView view;
  view.sizes = ctx.int_list(1);
  view.strides = ctx.int_list(2);
  view.offset = ctx.optional_int(3).value_or(0);
  return {read_view(ctx.b, x, view)};
}

std::vector<Value> diagonal(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t offset = ctx.int_arg(1);
  int64_t d1 = wrap_dim(ctx.int_arg(2), x.rank()), d2 = wrap_dim(ctx.int_arg(3), x.rank());
  std::vector<int64_t> strides = contiguous_strides(x.shape());
  StridedView view;
  const auto& out = ctx.out_type().shape;
  view.sizes = out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != d1 && i != d2) view.strides.push_back(strides[static_cast<size_t>(i)]);
  }
  view.strides.push_back(strides[static_cast<size_t>(d1)] + strides[static_cast<size_t>(d2)]);
  view.offset = offset >= 0 ? offset * strides[static_cast<size_t>(d2)]
                            : -offset * strides[static_cast<size_t>(d1)];
  if (out.back() == 0) return {ctx.b.constant(0, ctx.out_type())};
  return {read_view(ctx.b, x, view)};
}

std::vector<Value> split_with_sizes(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> sizes = ctx.int_list(1);
  int64_t dim = wrap_dim(ctx.int_arg(2), x.rank());
  std::vector<Value> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> lo(static_cast<size_t>(x.rank()), 0), hi = x.shape(),
                                                               st(static_cast<size_t>(x.rank()), 1);
    lo[static_cast<size_t>(dim)] = start;
    hi[static_cast<size_t>(dim)] = start + s;
    out.push_back(ctx.b.slice(x, lo, hi, st));
    start += s;
  }
  return out;
}

std::vector<Value> unbind(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
  std::vector<Value> out;
  for (size_t k = 0; k < ctx.out_types().size(); ++k) {
    std::vector<int64_t> lo(static_cast<size_t>(x.rank()), 0), hi = x.shape(),
                                                               st(static_cast<size_t>(x.rank()), 1);
    lo[static_cast<size_t>(dim)] = static_cast<int64_t>(k);
    hi[static_cast<size_t>(dim)] = static_cast<int64_t>(k) + 1;
    out.push_back(ctx.b.reshape(ctx.b.slice(x, lo, hi, st), ctx.out_type(k).shape));
  }
  return out;
}

// _to_copy inside a graph changes dtype (the device is the graph's own).
std::vector<Value> to_copy(LoweringContext& ctx) {
  return {ctx.b.convert(ctx.tensor(0), ctx.out_type().dtype)};
}

// Factories inside graphs: their shape is the graph's (structure), their fill value a value.
LoweringFn fill_with_arg(size_t index) {
  return [index](LoweringContext& ctx) -> std::vector<Value> {
    check_scalar_arg_fits(ctx.arg(index), ctx.out_type().dtype, ctx.out_type().numel());
    return {coerce(ctx.b, ctx.tensor(index), ctx.out_type())};
  };
}

LoweringFn fill_with(double value) {
  return [value](LoweringContext& ctx) -> std::vector<Value> {
    return {ctx.b.constant(value, ctx.out_type())};
  };
}

std::vector<Value> arange_graph(LoweringContext& ctx) {
  const TensorType& out = ctx.out_type();
  ElementType compute =
      shlo::is_float(out.dtype) && out.dtype != ElementType::kF64 ? ElementType::kF32 : out.dtype;
  TensorType ct(compute, out.shape);
  Value start = coerce(ctx.b, ctx.tensor(0), ct);
  Value step = coerce(ctx.b, ctx.tensor(2), ct);
  Value idx = ctx.b.convert(ctx.b.iota(TensorType(ElementType::kS64, out.shape), 0), compute);
  return {ctx.b.convert(ctx.b.add(start, ctx.b.mul(idx, step)), out.dtype)};
}

// The *_scatter ops (functional inverses of views that backward graphs use): `src` written
// into the view of a contiguous `self`.
StridedView slice_view(const Value& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  StridedView v;
  std::vector<int64_t> strides = contiguous_strides(x.shape());
  v.sizes = x.shape();
  v.strides = strides;
  int64_t n = x.shape()[static_cast<size_t>(dim)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::min(std::max<int64_t>(start, 0), n);
  end = std::min(std::max(end, start), n);
  v.sizes[static_cast<size_t>(dim)] = (end - start + step - 1) / step;
  v.strides[static_cast<size_t>(dim)] = strides[static_cast<size_t>(dim)] * step;
  v.offset = start * strides[static_cast<size_t>(dim)];
  return v;
}

std::vector<Value> slice_scatter(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(2), x.rank());
  int64_t n = x.shape()[static_cast<size_t>(dim)];
  StridedView v = slice_view(x, dim, ctx.optional_int(3).value_or(0),
                             ctx.optional_int(4).value_or(n), ctx.int_arg(5));
  Value src = ctx.b.convert(ctx.tensor(1), x.dtype());
  return {write_view(ctx.b, x, v, src)};
}

std::vector<Value> select_scatter(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.int_arg(2), x.rank());
  int64_t index = ctx.int_arg(3);
  if (index < 0) index += x.shape()[static_cast<size_t>(dim)];
  StridedView v = slice_view(x, dim, index, index + 1, 1);
  v.sizes.erase(v.sizes.begin() + dim);
  v.strides.erase(v.strides.begin() + dim);
  Value src = ctx.b.convert(ctx.tensor(1), x.dtype());
  return {write_view(ctx.b, x, v, src)};
}

std::vector<Value> as_strided_scatter(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  StridedView v;
  v.sizes = ctx.int_list(2);
  v.strides = ctx.int_list(3);
  v.offset = ctx.optional_int(4).value_or(0);
  return {write_view(ctx.b, x, v, ctx.b.convert(ctx.tensor(1), x.dtype()))};
}

std::vector<Value> diagonal_scatter(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  Value src = ctx.b.convert(ctx.tensor(1), x.dtype());
  int64_t offset = ctx.int_arg(2);
  int64_t d1 = wrap_dim(ctx.int_arg(3), x.rank()), d2 = wrap_dim(ctx.int_arg(4), x.rank());
  std::vector<int64_t> strides = contiguous_strides(x.shape());
  StridedView v;
  v.sizes = src.shape();
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != d1 && i != d2) v.strides.push_back(strides[static_cast<size_t>(i)]);
  }
  v.strides.push_back(strides[static_cast<size_t>(d1)] + strides[static_cast<size_t>(d2)]);
  v.offset = offset >= 0 ? offset * strides[static_cast<size_t>(d2)]
                         : -offset * strides[static_cast<size_t>(d1)];
  return {write_view(ctx.b, x, v, src)};
}

// x.view(dtype): the same bits read as another type; a different width splits or joins the last
// dim, as PyTorch's view does (a host buffer of int32 words carrying float32 values).
std::vector<Value> view_dtype(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  const TensorType& out = ctx.out_type();
  const int from = shlo::bit_width(x.dtype()), to = shlo::bit_width(out.dtype);
  if (from == to) return {ctx.b.bitcast_convert(x, out.dtype)};
  std::vector<int64_t> split = from > to ? x.shape() : out.shape;
  split.push_back(from > to ? from / to : to / from);
  if (from > to) {
    Value parts = shlo::bitcast_convert(ctx.b, x, TensorType(out.dtype, split));
    return {ctx.b.reshape(parts, out.shape)};
  }
  return {shlo::bitcast_convert(ctx.b, ctx.b.reshape(x, split), out)};
}

TORCHTPU_LOWERING("aten::slice_scatter", slice_scatter, kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::select_scatter", select_scatter);
TORCHTPU_GRAPH_LOWERING("aten::as_strided_scatter", as_strided_scatter);
TORCHTPU_GRAPH_LOWERING("aten::diagonal_scatter", diagonal_scatter);

TORCHTPU_LOWERING("aten::scalar_tensor", fill_with_arg(0), kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::full", fill_with_arg(1), kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::full_like", fill_with_arg(1), kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::new_full", fill_with_arg(2));
TORCHTPU_GRAPH_LOWERING("aten::zeros", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::ones", fill_with(1));
TORCHTPU_GRAPH_LOWERING("aten::zeros_like", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::ones_like", fill_with(1));
TORCHTPU_GRAPH_LOWERING("aten::empty_like", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::empty.memory_format", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::empty_strided", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::empty_permuted", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::new_zeros", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::new_ones", fill_with(1));
TORCHTPU_GRAPH_LOWERING("aten::new_empty", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::new_empty_strided", fill_with(0));
TORCHTPU_GRAPH_LOWERING("aten::arange.start_step", arange_graph);

TORCHTPU_LOWERING("aten::view", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::view.dtype", view_dtype);
TORCHTPU_LOWERING("aten::_unsafe_view", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::reshape", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::squeeze", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::squeeze.dim", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::squeeze.dims", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::unsqueeze", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::flatten.using_ints", reshape_to_out, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::alias", identity, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::detach", identity, kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::lift_fresh_copy", identity);
TORCHTPU_LOWERING("aten::expand", expand, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::permute", permute, kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::transpose.int", transpose);
TORCHTPU_GRAPH_LOWERING("aten::t", t);
TORCHTPU_GRAPH_LOWERING("aten::numpy_T", t);
TORCHTPU_LOWERING("aten::slice.Tensor", slice, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::select.int", select, kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::as_strided", as_strided);
TORCHTPU_LOWERING("aten::diagonal", diagonal, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::split_with_sizes", split_with_sizes, kGraphOnly | kComplex);
TORCHTPU_GRAPH_LOWERING("aten::unbind.int", unbind);
TORCHTPU_LOWERING("aten::_to_copy", to_copy, kGraphOnly | kComplex);
// PyTorch's reference decompositions (isclose, lcm, renorm...) cast with the prim.
TORCHTPU_GRAPH_LOWERING("prims::convert_element_type", to_copy);

}  // namespace
}  // namespace torchtpu::lowering
