// _upsample_bilinear2d_aa / _upsample_bicubic2d_aa (interpolate(antialias=True)) and their
// backwards, following ATen's CPU separable antialias kernel: per spatial dim, output i reads
// inputs [xmin, xmin + xsize) around center = scale * (i + 0.5) with filter weights (support
// scaled by the scale when downsampling) normalized to sum 1. The weights depend only on shapes
// and scales, so each dim's taps are computed here with the CPU kernel's arithmetic and emitted
// as constants; the forward gathers the width's taps then the height's (as the CPU kernel
// resamples), the backward the transposed taps (lowering/taps.h). uint8 images take the CPU's
// integer kernel (lowering/resample_u8.h).
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/resample_u8.h"
#include "lowering/taps.h"

namespace torchtpu::lowering {
namespace {

// HelperInterpLinear / HelperInterpCubic::aa_filter in the weights' type T.
template <typename T>
T aa_filter(T x, bool cubic) {
  x = std::abs(x);
  if (!cubic) return x < 1.0 ? static_cast<T>(1.0 - x) : static_cast<T>(0.0);
  constexpr T a = -0.5;
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// One dim's antialias taps (HelperInterpBase::_compute_indices_min_size_weights_aa) with the
// CPU kernel's arithmetic in T: float for float inputs, double for double ones.
template <typename T>
Taps aa_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> opt_scale,
             bool cubic) {
  T scale;
  if (align_corners) {
    scale = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : static_cast<T>(0);
  } else if (opt_scale && *opt_scale > 0) {
    scale = static_cast<T>(1.0 / *opt_scale);
  } else {
    scale = static_cast<T>(in) / static_cast<T>(out);
  }
  int interp_size = cubic ? 4 : 2;
  T support = scale >= 1.0 ? static_cast<T>((interp_size * 0.5) * scale)
                           : static_cast<T>(interp_size * 0.5);
  int64_t max_interp = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  T invscale = scale >= 1.0 ? static_cast<T>(1.0 / scale) : static_cast<T>(1.0);
  Taps t(static_cast<size_t>(max_interp), in);
  for (int64_t i = 0; i < out; ++i) {
    T center = static_cast<T>(scale * (static_cast<double>(i) + 0.5));
    int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp(xsize, int64_t{0}, max_interp);
    std::vector<T> w(static_cast<size_t>(max_interp), 0);
    T total = 0;
    for (int64_t j = 0; j < xsize; ++j) {
      T d = static_cast<T>(j + xmin) - center;
      w[static_cast<size_t>(j)] = aa_filter<T>(static_cast<T>((d + 0.5) * invscale), cubic);
      total += w[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < max_interp; ++j) {
      T v = w[static_cast<size_t>(j)];
      if (total != 0 && j < xsize) v /= total;
      t.add(static_cast<size_t>(j), j < xsize ? xmin + j : -1, static_cast<double>(v));
    }
  }
  return t;
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
    std::vector<std::optional<double>> scales;
    for (size_t k = 0; k < 2; ++k) {
      scales.push_back(ctx.is_none(first_scale + k)
                           ? std::nullopt
                           : std::optional<double>(ctx.double_arg(first_scale + k)));
    }
    if (!backward && x.dtype() == ElementType::kU8) {
      return {resample_u8(b, x, out.shape, cubic, /*antialias=*/true, align, scales)};
    }
    TORCH_CHECK(shlo::is_float(x.dtype()), "\"", ctx.schema().name(), "\" not implemented for '",
                c10::toString(to_scalar_type(x.dtype())), "'");
    Value v = b.convert(x, opmath_type(x.dtype()));
    int64_t lead = x.rank() - 2;
    // Width first, then height (the CPU kernel's order). The forward skips dims whose size is
    // unchanged, as the CPU kernel does; its backward applies every dim's weights.
    for (int64_t k = 1; k >= 0; --k) {
      size_t d = static_cast<size_t>(lead + k);
      int64_t in = in_shape[d], o = out_shape[d];
      if (in == o && !backward) continue;
      std::optional<double> scale = scales[static_cast<size_t>(k)];
      Taps taps = v.dtype() == ElementType::kF64 ? aa_taps<double>(in, o, align, scale, cubic)
                                                 : aa_taps<float>(in, o, align, scale, cubic);
      v = (backward ? taps.transposed() : taps).apply(b, v, lead + k);
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
