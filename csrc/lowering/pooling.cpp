// Pooling, forward and backward, over the trailing 1-3 spatial dims of a (N, C, *) or (C, *)
// input: max pooling with indices, average pooling and adaptive average/max pooling.
//
// Windows run on stablehlo.reduce_window after the input is padded explicitly with
// stablehlo.pad, whose negative edge padding also crops the tail that no window reaches, so
// one code path serves ceil_mode and floor mode. Max pooling carries (value, flat index) pairs
// through a variadic reduce_window whose comparator is a total order (larger value, NaN first,
// then smaller index), so ties and NaNs resolve like the CPU kernel whatever order XLA combines
// in. Gradients of max pooling scatter-add into the recorded indices; gradients of average
// pooling are the transpose of the window sum (interior padding by stride - 1, then a window
// sum of the kernel size). Adaptive average pooling is a product of per-dim averaging matrices.
// max_unpool writes values back at recorded indices (the same scatter as max pooling's
// gradient).
#include "lowering/pooling.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "lowering/checks.h"
#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/taps.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// reduce_window over all dims of `inputs` (no padding: callers pad explicitly).
std::vector<Value> reduce_window(FunctionBuilder& b, const std::vector<Value>& inputs,
                                 const std::vector<Value>& inits,
                                 const std::vector<int64_t>& window,
                                 const std::vector<int64_t>& strides,
                                 const std::vector<int64_t>& dilations,
                                 const shlo::RegionFn& body) {
  return shlo::reduce_window(b, inputs, inits, {window, strides, {}, dilations, {}}, body);
}

Value window_sum(FunctionBuilder& b, Value x, const std::vector<int64_t>& window,
                 const std::vector<int64_t>& strides) {
  Value zero = b.constant(0, TensorType(x.dtype(), {}));
  std::vector<int64_t> dil(window.size(), 1);
  return reduce_window(b, {x}, {zero}, window, strides, dil,
                       [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
                         return {rb.add(a[0], a[1])};
                       })[0];
}

// ---- window geometry ----

// Kernel, stride, padding, dilation per spatial dim, the spatial sizes in and out, and the
// high padding that makes the last window end exactly at the padded edge (negative: crop).
struct Window {
  size_t nd = 0, lead = 0;  // spatial dims, dims before them
  std::vector<int64_t> k, s, p, d, in, out, hi;
};

std::vector<int64_t> expand(std::vector<int64_t> v, size_t nd, const std::vector<int64_t>& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1 && nd > 1) return std::vector<int64_t>(nd, v[0]);
  return v;
}

Window window_of(const LoweringContext& ctx, const Value& x, const std::vector<int64_t>& out_shape,
                 size_t nd, bool has_dilation) {
  Window w;
  w.nd = nd;
  TORCH_CHECK(x.rank() == static_cast<int64_t>(nd) + 1 || x.rank() == static_cast<int64_t>(nd) + 2,
              "torchtpu lowering: ", ctx.schema().name(), ": expected a ", nd + 1, "d or ", nd + 2,
              "d input");
  w.lead = static_cast<size_t>(x.rank()) - nd;
  w.k = expand(ctx.int_list(ctx.index_of("kernel_size")), nd, {});
  w.s = expand(ctx.int_list(ctx.index_of("stride")), nd, w.k);
  w.p = expand(ctx.int_list(ctx.index_of("padding")), nd, std::vector<int64_t>(nd, 0));
  w.d = has_dilation
            ? expand(ctx.int_list(ctx.index_of("dilation")), nd, std::vector<int64_t>(nd, 1))
            : std::vector<int64_t>(nd, 1);
  TORCH_CHECK(w.k.size() == nd && w.s.size() == nd && w.p.size() == nd && w.d.size() == nd,
              "torchtpu lowering: ", ctx.schema().name(), ": window parameters must have ", nd,
              " entries");
  for (size_t i = 0; i < nd; ++i) {
    w.in.push_back(x.shape()[w.lead + i]);
    w.out.push_back(out_shape[w.lead + i]);
    int64_t span = (w.out[i] - 1) * w.s[i] + w.d[i] * (w.k[i] - 1) + 1;
    w.hi.push_back(span - w.in[i] - w.p[i]);
  }
  return w;
}

// Pads (or crops) the spatial dims of `x` so that windows start at offset 0 and the last one
// ends at the edge.
Value pad_spatial(FunctionBuilder& b, Value x, const Window& w, Value pad_value) {
  std::vector<int64_t> lo(w.lead, 0), hi(w.lead, 0), interior(static_cast<size_t>(x.rank()), 0);
  for (size_t i = 0; i < w.nd; ++i) {
    lo.push_back(w.p[i]);
    hi.push_back(w.hi[i]);
  }
  return b.pad(x, pad_value, lo, hi, interior);
}

std::vector<int64_t> full(const Window& w, const std::vector<int64_t>& spatial, int64_t fill) {
  std::vector<int64_t> v(w.lead, fill);
  v.insert(v.end(), spatial.begin(), spatial.end());
  return v;
}

// ---- max pooling ----

Value lowest(FunctionBuilder& b, ElementType t) {
  TensorType s(t, {});
  if (shlo::is_float(t)) return b.constant(-std::numeric_limits<double>::infinity(), s);
  switch (t) {
    case ElementType::kS8:
      return b.constant_int(INT8_MIN, s);
    case ElementType::kS16:
      return b.constant_int(INT16_MIN, s);
    case ElementType::kS32:
      return b.constant_int(INT32_MIN, s);
    case ElementType::kS64:
      return b.constant_int(std::numeric_limits<int64_t>::min(), s);
    default:
      return b.constant_int(0, s);
  }
}

// (value, index) pairs: the larger value wins, a NaN beats everything, ties go to the smaller
// index (the CPU kernel keeps the first maximum in raster order).
std::vector<Value> max_with_index(FunctionBuilder& rb, const std::vector<Value>& a, bool fp) {
  Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
  Value better = rb.compare(av, bv, CompareDirection::kGT);
  Value eq = rb.compare(av, bv, CompareDirection::kEQ);
  Value first = rb.compare(ai, bi, CompareDirection::kLT);
  Value pick_a = rb.binary("stablehlo.or", better, rb.binary("stablehlo.and", eq, first));
  if (fp) {
    Value a_nan = rb.compare(av, av, CompareDirection::kNE);
    Value b_not_nan = rb.compare(bv, bv, CompareDirection::kEQ);
    pick_a = rb.select(a_nan, rb.binary("stablehlo.or", b_not_nan, first),
                       rb.binary("stablehlo.and", b_not_nan, pick_a));
  }
  return {rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
}

// Flat index of every element within its plane (row-major over the spatial dims), s64.
Value plane_index(FunctionBuilder& b, const TensorType& t, const Window& w) {
  TensorType it(ElementType::kS64, t.shape);
  Value idx = b.constant_int(0, it);
  int64_t stride = 1;
  for (size_t i = w.nd; i-- > 0;) {
    Value term = b.iota(it, static_cast<int64_t>(w.lead + i));
    if (stride != 1) term = b.mul(term, b.constant_int(stride, it));
    idx = b.add(idx, term);
    stride *= w.in[i];
  }
  return idx;
}

std::vector<Value> max_pool_impl(LoweringContext& ctx, const Value& x, const Window& w) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type(0);
  if (out.numel() == 0 || x.type.numel() == 0) {
    return {zeros(b, out), zeros(b, ctx.out_type(1))};
  }
  Value idx = plane_index(b, x.type, w);
  Value xp = pad_spatial(b, x, w, lowest(b, x.dtype()));
  Value ip = pad_spatial(
      b, idx, w,
      b.constant_int(std::numeric_limits<int64_t>::max(), TensorType(ElementType::kS64, {})));
  bool fp = shlo::is_float(x.dtype());
  std::vector<Value> r = reduce_window(
      b, {xp, ip},
      {lowest(b, x.dtype()),
       b.constant_int(std::numeric_limits<int64_t>::max(), TensorType(ElementType::kS64, {}))},
      full(w, w.k, 1), full(w, w.s, 1), full(w, w.d, 1),
      [fp](FunctionBuilder& rb, const std::vector<Value>& a) { return max_with_index(rb, a, fp); });
  return {coerce(b, r[0], out), coerce(b, r[1], ctx.out_type(1))};
}

LoweringFn max_pool(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    require_dtype(ctx, x, x.dtype() != ElementType::kPred);
    Window w = window_of(ctx, x, ctx.out_type(0).shape, nd, true);
    return max_pool_impl(ctx, x, w);
  };
}

}  // namespace

// Declared in lowering/pooling.h; outside the anonymous namespace so the fractional pooling
// backward shares it.
Value scatter_planes(FunctionBuilder& b, Value grad, Value indices, const TensorType& in_type,
                     size_t lead, bool add) {
  ElementType acc = opmath_type(in_type.dtype);
  std::vector<int64_t> lead_shape(in_type.shape.begin(),
                                  in_type.shape.begin() + static_cast<int64_t>(lead));
  int64_t planes = product(lead_shape);
  int64_t plane_size = in_type.numel() / std::max<int64_t>(planes, 1);
  int64_t m = grad.type.numel() / std::max<int64_t>(planes, 1);
  if (in_type.numel() == 0 || grad.type.numel() == 0) return zeros(b, in_type);
  TensorType coord(ElementType::kS64, {planes, m, 1});
  Value plane = b.iota(coord, 0);
  Value flat = b.reshape(b.convert(indices, ElementType::kS64), {planes, m, 1});
  Value coords = b.reshape(b.concatenate({plane, flat}, 2), {planes * m, 2});
  Value updates = b.reshape(b.convert(grad, acc), {planes * m});
  Value base = zeros(b, TensorType(acc, {planes, plane_size}));
  Value r =
      b.scatter(base, coords, updates, {{}, {0, 1}, {0, 1}, 1}, add ? add_region : replace_region);
  return b.convert(b.reshape(r, in_type.shape), in_type.dtype);
}

namespace {

// max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
//                                      dilation, ceil_mode, indices)
LoweringFn max_pool_backward(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    Value grad = ctx.tensor(0);
    Value x = ctx.tensor(1);
    Value indices = ctx.tensor(ctx.index_of("indices"));
    const TensorType& out = ctx.out_type();
    size_t lead = static_cast<size_t>(x.rank()) - nd;
    return {
        coerce(ctx.b, scatter_planes(ctx.b, grad, indices, out.with_dtype(x.dtype()), lead), out)};
  };
}

// max_unpool{2,3}d(self, indices, output_size[, stride, padding]): every value lands at its
// recorded flat index within its plane of the output; the rest is zero.
LoweringFn max_unpool(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    const TensorType& out = ctx.out_type();
    size_t lead = static_cast<size_t>(out.rank()) - nd;
    // An index past the plane would be dropped by the scatter.
    int64_t plane = 1;
    std::string sizes;
    for (size_t i = lead; i < out.shape.size(); ++i) {
      plane *= out.shape[i];
      sizes += (i > lead ? "x" : "") + std::to_string(out.shape[i]);
    }
    check_indices(ctx, ctx.tensor(1), 0, plane,
                  "Found an invalid max index: {} (output volumes are of size " + sizes + ")",
                  /*index_error=*/false);
    return {coerce(ctx.b, scatter_planes(ctx.b, x, ctx.tensor(1), out, lead, false), out)};
  };
}

// ---- average pooling ----

// Per-output-position divisor, shape of the spatial output dims, in `t`.
Value avg_divisor(FunctionBuilder& b, const Window& w, bool count_include_pad, ElementType t) {
  Window sw = w;
  sw.lead = 0;
  Value one = b.constant(1, TensorType(t, {}));
  Value zero = b.constant(0, TensorType(t, {}));
  Value ones = b.broadcast_to(one, w.in);
  std::vector<int64_t> none(w.nd, 0);
  Value padded;
  if (count_include_pad) {
    // The padding counts, the ceil-mode overhang past it does not.
    std::vector<int64_t> extra;
    for (size_t i = 0; i < w.nd; ++i) extra.push_back(w.hi[i] - w.p[i]);
    padded = b.pad(b.pad(ones, one, w.p, w.p, none), zero, none, extra, none);
  } else {
    padded = pad_spatial(b, ones, sw, zero);
  }
  return window_sum(b, padded, w.k, w.s);
}

struct AvgArgs {
  bool count_include_pad;
  std::optional<int64_t> divisor_override;
};

AvgArgs avg_args(const LoweringContext& ctx) {
  AvgArgs a;
  a.count_include_pad = ctx.bool_arg(ctx.index_of("count_include_pad"));
  a.divisor_override = ctx.optional_int(ctx.index_of("divisor_override"));
  return a;
}

Value divide_by(FunctionBuilder& b, Value v, const Window& w, const AvgArgs& a) {
  if (a.divisor_override) {
    return b.div(v, b.constant(static_cast<double>(*a.divisor_override), v.type));
  }
  Value div = avg_divisor(b, w, a.count_include_pad, v.dtype());
  std::vector<int64_t> dims;
  for (size_t i = 0; i < w.nd; ++i) dims.push_back(static_cast<int64_t>(w.lead + i));
  return b.div(v, b.broadcast_in_dim(div, v.shape(), dims));
}

LoweringFn avg_pool(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value x = ctx.tensor(0);
    if (out.numel() == 0 || x.type.numel() == 0) return {zeros(b, out)};
    Window w = window_of(ctx, x, out.shape, nd, false);
    AvgArgs a = avg_args(ctx);
    ElementType acc = opmath_type(x.dtype());
    Value xp = pad_spatial(b, b.convert(x, acc), w, b.constant(0, TensorType(acc, {})));
    Value s = window_sum(b, xp, full(w, w.k, 1), full(w, w.s, 1));
    return {coerce(b, divide_by(b, s, w, a), out)};
  };
}

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
//                         count_include_pad, divisor_override)
LoweringFn avg_pool_backward(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value grad = ctx.tensor(0);
    Value x = ctx.tensor(1);
    if (out.numel() == 0 || grad.type.numel() == 0) return {zeros(b, out)};
    Window w = window_of(ctx, x, grad.shape(), nd, false);
    AvgArgs a = avg_args(ctx);
    ElementType acc = opmath_type(x.dtype());
    Value g = divide_by(b, b.convert(grad, acc), w, a);
    // Scatter every output's share back over its window: dilate by the stride, pad by k - 1
    // and sum windows of k. The result spans the padded input [-p, in + hi).
    std::vector<int64_t> lo(w.lead, 0), hi(w.lead, 0), interior(w.lead, 0);
    for (size_t i = 0; i < w.nd; ++i) {
      lo.push_back(w.k[i] - 1);
      hi.push_back(w.k[i] - 1);
      interior.push_back(w.s[i] - 1);
    }
    Value zero = b.constant(0, TensorType(acc, {}));
    Value spread = window_sum(b, b.pad(g, zero, lo, hi, interior), full(w, w.k, 1),
                              std::vector<int64_t>(static_cast<size_t>(g.rank()), 1));
    // Back to [0, in): drop the padding, and give the cropped tail zeros.
    std::vector<int64_t> lo2(w.lead, 0), hi2(w.lead, 0), none(static_cast<size_t>(g.rank()), 0);
    for (size_t i = 0; i < w.nd; ++i) {
      lo2.push_back(-w.p[i]);
      hi2.push_back(-w.hi[i]);
    }
    return {coerce(b, b.pad(spread, zero, lo2, hi2, none), out)};
  };
}

// ---- adaptive pooling ----

// Bin i of `out` over `in` covers [floor(i * in / out), ceil((i + 1) * in / out)).
int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// Bin i of each dim as taps: every element of the bin with weight 1 / bin size (bins differ in
// size by at most one; shorter ones leave their last tap absent).
Taps averaging_taps(int64_t in, int64_t out) {
  int64_t kmax = 0;
  for (int64_t i = 0; i < out; ++i)
    kmax = std::max(kmax, bin_end(i, in, out) - bin_start(i, in, out));
  Taps t(static_cast<size_t>(kmax), in);
  for (int64_t i = 0; i < out; ++i) {
    int64_t start = bin_start(i, in, out), size = bin_end(i, in, out) - start;
    for (int64_t k = 0; k < kmax; ++k) {
      t.add(static_cast<size_t>(k), k < size ? start + k : -1, 1.0 / static_cast<double>(size));
    }
  }
  return t;
}

LoweringFn adaptive_avg_pool(size_t nd, bool backward) {
  return [nd, backward](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value x = ctx.tensor(0);  // forward: self; backward: grad_output
    const TensorType& in_t = backward ? ctx.tensor(1).type : x.type;
    const TensorType& out_t = backward ? x.type : out;
    require_dtype(ctx, x, shlo::is_float(x.dtype()));
    if (out.numel() == 0 || x.type.numel() == 0) return {zeros(b, out)};
    ElementType acc = opmath_type(x.dtype());
    Value v = b.convert(x, acc);
    size_t lead = static_cast<size_t>(x.rank()) - nd;
    for (size_t i = 0; i < nd; ++i) {
      int64_t in = in_t.shape[lead + i], o = out_t.shape[lead + i];
      if (in == o) continue;
      Taps taps = averaging_taps(in, o);
      v = (backward ? taps.transposed() : taps).apply(b, v, static_cast<int64_t>(lead + i));
    }
    return {coerce(b, v, out)};
  };
}

// Adaptive max pooling: every bin is padded to the largest bin size by repeating its last
// element (harmless for a max, and the repeat keeps the same index), gathered per dim, then
// reduced with the (value, index) comparator of max pooling.
std::vector<Value> lower_adaptive_max_pool(LoweringContext& ctx, size_t nd) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  const TensorType& out = ctx.out_type(0);
  require_dtype(ctx, x, shlo::is_float(x.dtype()));
  if (out.numel() == 0 || x.type.numel() == 0) {
    return {zeros(b, out), zeros(b, ctx.out_type(1))};
  }
  size_t lead = static_cast<size_t>(x.rank()) - nd;
  Window w;
  w.nd = nd;
  w.lead = lead;
  for (size_t i = 0; i < nd; ++i) w.in.push_back(x.shape()[lead + i]);
  Value vals = x;
  Value idx = plane_index(b, x.type, w);
  // After gathering dim i, it becomes (out_i, kmax_i) in place.
  std::vector<int64_t> reduce_dims;
  int64_t offset = 0;
  for (size_t i = 0; i < nd; ++i) {
    int64_t in = w.in[i], o = out.shape[lead + i];
    int64_t kmax = 0;
    for (int64_t j = 0; j < o; ++j) {
      kmax = std::max(kmax, bin_end(j, in, o) - bin_start(j, in, o));
    }
    TensorType it(ElementType::kS64, {o, kmax});
    Value bin = b.iota(it, 0), k = b.iota(it, 1);
    Value in_c = b.constant_int(in, it), o_c = b.constant_int(o, it), one = b.constant_int(1, it);
    Value start = b.div(b.mul(bin, in_c), o_c);
    Value end = b.div(b.add(b.mul(b.add(bin, one), in_c), b.sub(o_c, one)), o_c);
    Value pos = b.min(b.add(start, k), b.sub(end, one));
    int64_t dim = static_cast<int64_t>(lead + i) + offset;
    auto gather = [&](Value v) {
      std::vector<int64_t> shape = v.shape(), slice = v.shape(), offset_dims;
      slice[static_cast<size_t>(dim)] = 1;
      shape[static_cast<size_t>(dim)] = o;
      shape.insert(shape.begin() + dim + 1, kmax);
      for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
        if (d != dim && d != dim + 1) offset_dims.push_back(d);
      }
      return b.gather(v, pos, {offset_dims, {dim}, {dim}, 2}, slice, v.type.with_shape(shape));
    };
    vals = gather(vals);
    idx = gather(idx);
    reduce_dims.push_back(dim + 1);
    offset += 1;
  }
  bool fp = shlo::is_float(x.dtype());
  std::vector<Value> r = b.reduce(
      {vals, idx},
      {lowest(b, x.dtype()),
       b.constant_int(std::numeric_limits<int64_t>::max(), TensorType(ElementType::kS64, {}))},
      reduce_dims,
      [fp](FunctionBuilder& rb, const std::vector<Value>& a) { return max_with_index(rb, a, fp); });
  return {coerce(b, r[0], out), coerce(b, r[1], ctx.out_type(1))};
}

// adaptive_max_pool{2,3}d_backward(grad_output, self, indices)
std::vector<Value> lower_adaptive_max_pool_backward(LoweringContext& ctx, size_t nd) {
  Value grad = ctx.tensor(0);
  Value x = ctx.tensor(1);
  Value indices = ctx.tensor(2);
  const TensorType& out = ctx.out_type();
  size_t lead = static_cast<size_t>(x.rank()) - nd;
  return {
      coerce(ctx.b, scatter_planes(ctx.b, grad, indices, out.with_dtype(x.dtype()), lead), out)};
}

TORCHTPU_LOWERING("aten::max_pool2d_with_indices", max_pool(2));
TORCHTPU_LOWERING("aten::max_pool3d_with_indices", max_pool(3));
TORCHTPU_LOWERING("aten::max_pool2d_with_indices_backward", max_pool_backward(2));
TORCHTPU_LOWERING("aten::max_pool3d_with_indices_backward", max_pool_backward(3));
TORCHTPU_LOWERING("aten::max_unpool2d", max_unpool(2));
TORCHTPU_LOWERING("aten::max_unpool3d", max_unpool(3));
TORCHTPU_LOWERING("aten::avg_pool2d", avg_pool(2));
TORCHTPU_LOWERING("aten::avg_pool3d", avg_pool(3));
TORCHTPU_LOWERING("aten::avg_pool2d_backward", avg_pool_backward(2));
TORCHTPU_LOWERING("aten::avg_pool3d_backward", avg_pool_backward(3));
TORCHTPU_LOWERING("aten::_adaptive_avg_pool2d", adaptive_avg_pool(2, false));
TORCHTPU_LOWERING("aten::_adaptive_avg_pool3d", adaptive_avg_pool(3, false));
TORCHTPU_LOWERING("aten::_adaptive_avg_pool2d_backward", adaptive_avg_pool(2, true));
TORCHTPU_LOWERING("aten::_adaptive_avg_pool3d_backward", adaptive_avg_pool(3, true));
TORCHTPU_LOWERING("aten::adaptive_max_pool2d",
                  [](LoweringContext& ctx) { return lower_adaptive_max_pool(ctx, 2); });
TORCHTPU_LOWERING("aten::adaptive_max_pool3d",
                  [](LoweringContext& ctx) { return lower_adaptive_max_pool(ctx, 3); });
TORCHTPU_LOWERING("aten::adaptive_max_pool2d_backward",
                  [](LoweringContext& ctx) { return lower_adaptive_max_pool_backward(ctx, 2); });
TORCHTPU_LOWERING("aten::adaptive_max_pool3d_backward",
                  [](LoweringContext& ctx) { return lower_adaptive_max_pool_backward(ctx, 3); });

}  // namespace
}  // namespace torchtpu::lowering
