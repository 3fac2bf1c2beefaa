// _upsample_bilinear2d_aa / _upsample_bicubic2d_aa (interpolate(antialias=True)) and their
// backwards, following ATen's CPU separable antialias kernel: per spatial dim, output i reads
// inputs [xmin, xmin + xsize) around center = scale * (i + 0.5) with filter weights (support
// scaled by the scale when downsampling) normalized to sum 1. The weights depend only on shapes
// and scales, so each dim's (out, in) weight matrix is computed here with the CPU kernel's
// float arithmetic and emitted as a constant; the forward contracts the width then the height
// (as the CPU kernel resamples), the backward contracts the gradient with the transposes.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "lowering/dense_constant.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

bool is_half(ElementType t) { return t == ElementType::kBF16 || t == ElementType::kF16; }

float bilinear_filter(float x) {
  if (x < 0) x = -x;
  if (x < 1) return 1 - x;
  return 0;
}

float bicubic_filter(float x) {
  const double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return static_cast<float>(((a + 2.0) * x - (a + 3.0)) * x * x + 1);
  if (x < 2.0) return static_cast<float>((((x - 5) * x + 8) * x - 4) * a);
  return 0.0f;
}

// The (out, in) antialias weight matrix of one dim (HelperInterpBase::_compute_weights_aa).
std::vector<float> aa_matrix(int64_t in, int64_t out, bool align_corners,
                             std::optional<double> opt_scale, bool cubic) {
  float scale;
  if (align_corners) {
    scale = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  } else if (opt_scale && *opt_scale > 0) {
    scale = static_cast<float>(1.0 / *opt_scale);
  } else {
    scale = static_cast<float>(in) / static_cast<float>(out);
  }
  int interp_size = cubic ? 4 : 2;
  float support = scale >= 1.0f ? static_cast<float>((interp_size * 0.5) * scale)
                                : static_cast<float>(interp_size * 0.5);
  int64_t max_interp = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  float invscale = scale >= 1.0f ? static_cast<float>(1.0 / scale) : 1.0f;
  std::vector<float> m(static_cast<size_t>(out * in), 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    float center = static_cast<float>(scale * (static_cast<double>(i) + 0.5));
    int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp(xsize, int64_t{0}, max_interp);
    std::vector<float> w(static_cast<size_t>(xsize));
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      auto arg = static_cast<float>((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      w[static_cast<size_t>(j)] = cubic ? bicubic_filter(arg) : bilinear_filter(arg);
      total += w[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < xsize; ++j) {
      float v = w[static_cast<size_t>(j)];
      if (total != 0.0f) v /= total;
      m[static_cast<size_t>(i * in + xmin + j)] = v;
    }
  }
  return m;
}

// Contracts dim `dim` of x with m along m's dim `mdim`; the result dim takes m's other size.
Value contract(FunctionBuilder& b, Value x, Value m, int64_t dim, int64_t mdim) {
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) shape.push_back(x.shape()[static_cast<size_t>(i)]);
  }
  shape.push_back(m.shape()[static_cast<size_t>(1 - mdim)]);
  Value r =
      b.dot_general(x, b.convert(m, x.dtype()), {}, {}, {dim}, {mdim}, x.type.with_shape(shape));
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.rank() - 1; ++i) {
    if (i == dim) perm.push_back(x.rank() - 1);
    perm.push_back(i);
  }
  if (dim == x.rank() - 1) perm.push_back(x.rank() - 1);
  return b.transpose(r, perm);
}

// Forward (self, output_size, align_corners, scales_h, scales_w) or backward (grad_output,
// output_size, input_size, align_corners, scales_h, scales_w).
LoweringFn upsample_aa(bool cubic, bool backward) {
  return [cubic, backward](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value x = ctx.tensor(0);
    if (out.numel() == 0 || x.type.numel() == 0) return {zeros(b, out)};
    bool align = ctx.bool_arg(backward ? 3 : 2);
    const std::vector<int64_t>& in_shape = backward ? out.shape : x.shape();
    const std::vector<int64_t>& out_shape = backward ? x.shape() : out.shape;
    size_t first_scale = ctx.num_args() - 2;
    Value v = b.convert(x, is_half(x.dtype()) ? ElementType::kF32 : x.dtype());
    int64_t lead = x.rank() - 2;
    // Width first, then height (the CPU kernel's order); dims whose size is unchanged are
    // skipped as the CPU kernel does.
    for (int64_t k = 1; k >= 0; --k) {
      size_t d = static_cast<size_t>(lead + k);
      int64_t in = in_shape[d], o = out_shape[d];
      if (in == o) continue;
      std::optional<double> scale;
      if (!ctx.is_none(first_scale + static_cast<size_t>(k))) {
        scale = ctx.double_arg(first_scale + static_cast<size_t>(k));
      }
      Value m = dense_f32(b, aa_matrix(in, o, align, scale, cubic), {o, in});
      v = contract(b, v, m, lead + k, backward ? 0 : 1);
    }
    return {coerce(b, v, out)};
  };
}

TORCHTPU_LOWERING("aten::_upsample_bilinear2d_aa", upsample_aa(false, false));
TORCHTPU_LOWERING("aten::_upsample_bicubic2d_aa", upsample_aa(true, false));
TORCHTPU_LOWERING("aten::_upsample_bilinear2d_aa_backward", upsample_aa(false, true));
TORCHTPU_LOWERING("aten::_upsample_bicubic2d_aa_backward", upsample_aa(true, true));

}  // namespace
}  // namespace torchtpu::lowering
