// Resampling, edge padding and patch extraction: upsample nearest / nearest-exact /
// (bi/tri)linear / bicubic, reflection / replication padding (forward and backward), and
// im2col / col2im (F.unfold / F.fold, each the other's gradient) and channel_shuffle.
//
// Resampling and padding move data along each spatial dim independently, by source positions
// that depend only on shapes and scale attributes. Those positions (and interpolation weights)
// are computed here in C++ with the CPU kernels' own float arithmetic and emitted as dense
// constants, so results match CPU closely; the forward gathers the taps of each dim and the
// backward gathers the transposed taps (lowering/taps.h), so a non-finite value only reaches
// the elements the CPU kernels let it reach.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/resample_u8.h"
#include "lowering/taps.h"

namespace torchtpu::lowering {

namespace {

// ---- upsampling ----

// 1 / scale when a positive scale is given, else in / out (as float, like the CPU kernels).
float scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  if (scale && *scale > 0) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

Taps nearest_taps(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  Taps t(1, in);
  float s = scale_value(scale, in, out);
  for (int64_t i = 0; i < out; ++i) {
    int64_t src;
    if (exact) {
      src = std::min(static_cast<int64_t>(std::floor((static_cast<float>(i) + 0.5f) * s)), in - 1);
    } else if (out == in) {
      src = i;
    } else if (out == 2 * in) {
      src = i >> 1;
    } else {
      src = std::min(static_cast<int64_t>(std::floor(static_cast<float>(i) * s)), in - 1);
    }
    t.idx[0].push_back(src);
  }
  return t;
}

// The source coordinate of output i (area_pixel_compute_source_index).
float source_index(float ratio, int64_t i, bool align_corners, bool cubic) {
  if (align_corners) return ratio * static_cast<float>(i);
  float real = ratio * (static_cast<float>(i) + 0.5f) - 0.5f;
  return !cubic && real < 0 ? 0.0f : real;
}

float source_ratio(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  }
  return scale_value(scale, in, out);
}

Taps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps t(2, in);
  float ratio = source_ratio(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    float real = source_index(ratio, i, align_corners, false);
    int64_t i0 = std::min(static_cast<int64_t>(real), in - 1);
    float l1 = std::min(std::max(real - static_cast<float>(i0), 0.0f), 1.0f);
    t.add(0, i0, 1.0f - l1);
    t.add(1, i0 + (i0 < in - 1 ? 1 : 0), l1);
  }
  return t;
}

// Keys' cubic convolution with A = -0.75 over the 4 neighbours floor(x) - 1 .. floor(x) + 2,
// clamped to the edge (get_cubic_upsample_coefficients).
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps t(4, in);
  const float a = -0.75f;
  auto conv1 = [a](float x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  auto conv2 = [a](float x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  float ratio = source_ratio(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    float real = source_index(ratio, i, align_corners, true);
    int64_t i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    float l = std::min(std::max(real - static_cast<float>(i0), 0.0f), 1.0f);
    float c[4] = {conv2(l + 1), conv1(l), conv1(1 - l), conv2(2 - l)};
    for (int64_t k = 0; k < 4; ++k) {
      t.add(static_cast<size_t>(k), std::min(std::max<int64_t>(i0 - 1 + k, 0), in - 1), c[k]);
    }
  }
  return t;
}

enum class Mode { kNearest, kNearestExact, kLinear, kCubic };

// Resampling taps per spatial dim. The scales are the schema's last `nd` arguments.
std::vector<Taps> upsample_taps(const LoweringContext& ctx, Mode mode, size_t nd,
                                const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                bool align_corners) {
  std::vector<Taps> taps;
  size_t first_scale = ctx.num_args() - nd;
  for (size_t i = 0; i < nd; ++i) {
    size_t si = first_scale + i;
    std::optional<double> scale;
    if (!ctx.is_none(si)) scale = ctx.double_arg(si);
    int64_t a = in[in.size() - nd + i], o = out[out.size() - nd + i];
    taps.push_back(mode == Mode::kLinear  ? linear_taps(a, o, align_corners, scale)
                   : mode == Mode::kCubic ? cubic_taps(a, o, align_corners, scale)
                                          : nearest_taps(a, o, scale, mode == Mode::kNearestExact));
  }
  return taps;
}

LoweringFn upsample(Mode mode, size_t nd) {
  return [mode, nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value x = ctx.tensor(0);
    bool fp = shlo::is_float(x.dtype());
    bool interpolate = mode == Mode::kLinear || mode == Mode::kCubic;
    // uint8: the nearest modes, and bilinear / bicubic 2d (their own integer kernel), as on CPU.
    require_dtype(ctx, x, fp || (x.dtype() == ElementType::kU8 && (!interpolate || nd == 2)));
    if (out.numel() == 0 || x.type.numel() == 0) return {zeros(b, out)};
    bool align = interpolate && ctx.bool_arg(2);
    if (!fp && interpolate) {
      size_t first_scale = ctx.num_args() - nd;
      std::vector<std::optional<double>> scales;
      for (size_t i = 0; i < nd; ++i) {
        scales.push_back(ctx.is_none(first_scale + i)
                             ? std::nullopt
                             : std::optional<double>(ctx.double_arg(first_scale + i)));
      }
      return {
          resample_u8(b, x, out.shape, mode == Mode::kCubic, /*antialias=*/false, align, scales)};
    }
    std::vector<Taps> taps = upsample_taps(ctx, mode, nd, x.shape(), out.shape, align);
    // Linear modes interpolate the last dim first, as the CPU kernel nests them.
    Value v = b.convert(x, fp ? opmath_type(x.dtype()) : x.dtype());
    int64_t lead = x.rank() - static_cast<int64_t>(nd);
    for (size_t i = nd; i-- > 0;) v = taps[i].apply(b, v, lead + static_cast<int64_t>(i));
    return {coerce(b, v, out)};
  };
}

// upsample_*_backward(grad_output, output_size, input_size, [align_corners,] scales...)
LoweringFn upsample_backward(Mode mode, size_t nd) {
  return [mode, nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value g = ctx.tensor(0);
    if (out.numel() == 0 || g.type.numel() == 0) return {zeros(b, out)};
    bool align = (mode == Mode::kLinear || mode == Mode::kCubic) && ctx.bool_arg(3);
    std::vector<Taps> taps = upsample_taps(ctx, mode, nd, out.shape, g.shape(), align);
    Value v = b.convert(g, opmath_type(g.dtype()));
    int64_t lead = g.rank() - static_cast<int64_t>(nd);
    for (size_t i = 0; i < nd; ++i) {
      v = taps[i].transposed().apply(b, v, lead + static_cast<int64_t>(i));
    }
    return {coerce(b, v, out)};
  };
}

// ---- reflection / replication padding ----

// padding = [left, right] for the last dim, then the one before it, ...
std::vector<Taps> pad_taps(const LoweringContext& ctx, const std::vector<int64_t>& in_shape,
                           size_t nd, bool reflect) {
  std::vector<int64_t> padding = ctx.int_list(ctx.index_of("padding"));
  TORCH_CHECK(padding.size() == 2 * nd, "torchtpu lowering: ", ctx.schema().name(), ": expected ",
              2 * nd, " padding values");
  std::vector<Taps> taps;
  for (size_t i = 0; i < nd; ++i) {
    size_t pi = 2 * (nd - 1 - i);
    int64_t lo = padding[pi], hi = padding[pi + 1];
    int64_t in = in_shape[in_shape.size() - nd + i];
    if (reflect) {
      TORCH_CHECK(lo < in && hi < in,
                  "Argument #4: Padding size should be less than the "
                  "corresponding input dimension, but got: padding (",
                  lo, ", ", hi, ") at dimension ", i, " of input ", in);
    }
    taps.emplace_back(1, in);
    for (int64_t j = -lo; j < in + hi; ++j) {
      int64_t src;
      if (reflect) {
        int64_t a = std::abs(j);
        src = (in - 1) - std::abs((in - 1) - a);
      } else {
        src = std::min(std::max<int64_t>(j, 0), in - 1);
      }
      taps.back().idx[0].push_back(src);
    }
  }
  return taps;
}

LoweringFn edge_pad(bool reflect, size_t nd) {
  return [reflect, nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value x = ctx.tensor(0);
    require_dtype(ctx, x, x.dtype() != ElementType::kPred);
    if (out.numel() == 0) return {zeros(b, out)};
    std::vector<Taps> taps = pad_taps(ctx, x.shape(), nd, reflect);
    int64_t lead = x.rank() - static_cast<int64_t>(nd);
    Value v = x;
    for (size_t i = 0; i < nd; ++i) v = taps[i].apply(b, v, lead + static_cast<int64_t>(i));
    return {coerce(b, v, out)};
  };
}

// *_pad*d_backward(grad_output, self, padding)
LoweringFn edge_pad_backward(bool reflect, size_t nd) {
  return [reflect, nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value g = ctx.tensor(0);
    Value x = ctx.tensor(1);
    if (out.numel() == 0 || g.type.numel() == 0) return {zeros(b, out)};
    std::vector<Taps> taps = pad_taps(ctx, x.shape(), nd, reflect);
    Value v = b.convert(g, opmath_type(g.dtype()));
    int64_t lead = g.rank() - static_cast<int64_t>(nd);
    for (size_t i = 0; i < nd; ++i) {
      v = taps[i].transposed().apply(b, v, lead + static_cast<int64_t>(i));
    }
    return {coerce(b, v, out)};
  };
}

// ---- im2col / col2im (F.unfold / F.fold) ----

struct Patches {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
  int64_t oh = 0, ow = 0;  // number of patch positions
};

Patches patches_of(const LoweringContext& ctx, int64_t h, int64_t w) {
  auto pair = [&](const char* name) {
    std::vector<int64_t> v = ctx.int_list(ctx.index_of(name));
    if (v.size() == 1) v.push_back(v[0]);
    TORCH_CHECK(v.size() == 2, "torchtpu lowering: ", ctx.schema().name(), ": ", name,
                " must have 2 entries");
    return v;
  };
  std::vector<int64_t> k = pair("kernel_size"), d = pair("dilation"), p = pair("padding"),
                       s = pair("stride");
  Patches r{k[0], k[1], d[0], d[1], p[0], p[1], s[0], s[1]};
  r.oh = (h + 2 * r.ph - r.dh * (r.kh - 1) - 1) / r.sh + 1;
  r.ow = (w + 2 * r.pw - r.dw * (r.kw - 1) - 1) / r.sw + 1;
  return r;
}

// im2col(self, kernel_size, dilation, padding, stride): (N, C, H, W) -> (N, C*kh*kw, L), the
// kernel offsets varying fastest within a channel. One strided slice per kernel offset.
std::vector<Value> lower_im2col(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  if (x.rank() == 3) x = b.reshape(x, {1, x.shape()[0], x.shape()[1], x.shape()[2]});
  int64_t n = x.shape()[0], c = x.shape()[1];
  Patches p = patches_of(ctx, x.shape()[2], x.shape()[3]);
  if (out.numel() == 0) return {zeros(b, out)};
  Value xp = b.pad(x, b.constant(0, TensorType(x.dtype(), {})), {0, 0, p.ph, p.pw},
                   {0, 0, p.ph, p.pw}, {0, 0, 0, 0});
  std::vector<Value> cols;
  for (int64_t i = 0; i < p.kh; ++i) {
    for (int64_t j = 0; j < p.kw; ++j) {
      int64_t h0 = i * p.dh, w0 = j * p.dw;
      Value sl = b.slice(xp, {0, 0, h0, w0},
                         {n, c, h0 + (p.oh - 1) * p.sh + 1, w0 + (p.ow - 1) * p.sw + 1},
                         {1, 1, p.sh, p.sw});
      cols.push_back(b.reshape(sl, {n, c, 1, p.oh * p.ow}));
    }
  }
  Value r = b.concatenate(cols, 2);
  return {coerce(b, b.reshape(r, out.shape), out)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): the transpose of
// im2col, summing overlapping patches: each kernel offset's block is dilated by the stride
// into place with stablehlo.pad and added.
std::vector<Value> lower_col2im(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value cols = ctx.tensor(0);
  std::vector<int64_t> size = ctx.int_list(ctx.index_of("output_size"));
  if (size.size() == 1) size.push_back(size[0]);
  int64_t h = size.at(0), w = size.at(1);
  if (cols.rank() == 2) cols = b.reshape(cols, {1, cols.shape()[0], cols.shape()[1]});
  Patches p = patches_of(ctx, h, w);
  if (out.numel() == 0) return {zeros(b, out)};
  int64_t n = cols.shape()[0], c = cols.shape()[1] / (p.kh * p.kw);
  ElementType acc = opmath_type(cols.dtype());
  Value blocks = b.reshape(b.convert(cols, acc), {n, c, p.kh * p.kw, p.oh, p.ow});
  Value zero = b.constant(0, TensorType(acc, {}));
  int64_t hp = h + 2 * p.ph, wp = w + 2 * p.pw;
  std::optional<Value> sum;
  for (int64_t i = 0; i < p.kh; ++i) {
    for (int64_t j = 0; j < p.kw; ++j) {
      int64_t k = i * p.kw + j, h0 = i * p.dh, w0 = j * p.dw;
      Value blk =
          b.reshape(b.slice(blocks, {0, 0, k, 0, 0}, {n, c, k + 1, p.oh, p.ow}, {1, 1, 1, 1, 1}),
                    {n, c, p.oh, p.ow});
      int64_t hi_h = hp - h0 - ((p.oh - 1) * p.sh + 1);
      int64_t hi_w = wp - w0 - ((p.ow - 1) * p.sw + 1);
      Value placed =
          b.pad(blk, zero, {0, 0, h0, w0}, {0, 0, hi_h, hi_w}, {0, 0, p.sh - 1, p.sw - 1});
      sum = sum ? b.add(*sum, placed) : placed;
    }
  }
  Value r = b.slice(*sum, {0, 0, p.ph, p.pw}, {n, c, p.ph + h, p.pw + w}, {1, 1, 1, 1});
  return {coerce(b, b.reshape(r, out.shape), out)};
}

// channel_shuffle(self, groups): (N, g, C/g, *) -> (N, C/g, g, *).
std::vector<Value> lower_channel_shuffle(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  int64_t g = ctx.int_arg(1);
  TORCH_CHECK(x.rank() >= 3 && g > 0 && x.shape()[1] % g == 0,
              "Number of channels must be "
              "divisible by groups. Got ",
              x.rank() >= 2 ? x.shape()[1] : 0, " channels and ", g, " groups.");
  std::vector<int64_t> split{x.shape()[0], g, x.shape()[1] / g}, perm{0, 2, 1};
  for (int64_t d = 2; d < x.rank(); ++d) {
    split.push_back(x.shape()[static_cast<size_t>(d)]);
    perm.push_back(d + 1);
  }
  return {coerce(b, b.reshape(b.transpose(b.reshape(x, split), perm), x.shape()), out)};
}

TORCHTPU_LOWERING("aten::upsample_nearest1d", upsample(Mode::kNearest, 1));
TORCHTPU_LOWERING("aten::im2col", lower_im2col);
TORCHTPU_LOWERING("aten::channel_shuffle", lower_channel_shuffle);
TORCHTPU_LOWERING("aten::native_channel_shuffle", lower_channel_shuffle);
TORCHTPU_LOWERING("aten::col2im", lower_col2im);
TORCHTPU_LOWERING("aten::upsample_nearest2d", upsample(Mode::kNearest, 2));
TORCHTPU_LOWERING("aten::upsample_nearest3d", upsample(Mode::kNearest, 3));
TORCHTPU_LOWERING("aten::_upsample_nearest_exact1d", upsample(Mode::kNearestExact, 1));
TORCHTPU_LOWERING("aten::_upsample_nearest_exact2d", upsample(Mode::kNearestExact, 2));
TORCHTPU_LOWERING("aten::_upsample_nearest_exact3d", upsample(Mode::kNearestExact, 3));
TORCHTPU_LOWERING("aten::upsample_linear1d", upsample(Mode::kLinear, 1));
TORCHTPU_LOWERING("aten::upsample_bilinear2d", upsample(Mode::kLinear, 2));
TORCHTPU_LOWERING("aten::upsample_trilinear3d", upsample(Mode::kLinear, 3));
TORCHTPU_LOWERING("aten::upsample_bicubic2d", upsample(Mode::kCubic, 2));
TORCHTPU_LOWERING("aten::upsample_nearest1d_backward", upsample_backward(Mode::kNearest, 1));
TORCHTPU_LOWERING("aten::upsample_nearest2d_backward", upsample_backward(Mode::kNearest, 2));
TORCHTPU_LOWERING("aten::upsample_nearest3d_backward", upsample_backward(Mode::kNearest, 3));
TORCHTPU_LOWERING("aten::_upsample_nearest_exact1d_backward",
                  upsample_backward(Mode::kNearestExact, 1));
TORCHTPU_LOWERING("aten::_upsample_nearest_exact2d_backward",
                  upsample_backward(Mode::kNearestExact, 2));
TORCHTPU_LOWERING("aten::_upsample_nearest_exact3d_backward",
                  upsample_backward(Mode::kNearestExact, 3));
TORCHTPU_LOWERING("aten::upsample_linear1d_backward", upsample_backward(Mode::kLinear, 1));
TORCHTPU_LOWERING("aten::upsample_bilinear2d_backward", upsample_backward(Mode::kLinear, 2));
TORCHTPU_LOWERING("aten::upsample_trilinear3d_backward", upsample_backward(Mode::kLinear, 3));
TORCHTPU_LOWERING("aten::upsample_bicubic2d_backward", upsample_backward(Mode::kCubic, 2));
TORCHTPU_LOWERING("aten::reflection_pad1d", edge_pad(true, 1));
TORCHTPU_LOWERING("aten::reflection_pad2d", edge_pad(true, 2));
TORCHTPU_LOWERING("aten::reflection_pad3d", edge_pad(true, 3));
TORCHTPU_LOWERING("aten::replication_pad1d", edge_pad(false, 1));
TORCHTPU_LOWERING("aten::replication_pad2d", edge_pad(false, 2));
TORCHTPU_LOWERING("aten::replication_pad3d", edge_pad(false, 3));
TORCHTPU_LOWERING("aten::reflection_pad1d_backward", edge_pad_backward(true, 1));
TORCHTPU_LOWERING("aten::reflection_pad2d_backward", edge_pad_backward(true, 2));
TORCHTPU_LOWERING("aten::reflection_pad3d_backward", edge_pad_backward(true, 3));
TORCHTPU_LOWERING("aten::replication_pad1d_backward", edge_pad_backward(false, 1));
TORCHTPU_LOWERING("aten::replication_pad2d_backward", edge_pad_backward(false, 2));
TORCHTPU_LOWERING("aten::replication_pad3d_backward", edge_pad_backward(false, 3));

}  // namespace
}  // namespace torchtpu::lowering
