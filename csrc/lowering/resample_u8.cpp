#include "lowering/resample_u8.h"

#include <algorithm>
#include <cmath>

#include "lowering/taps.h"

namespace torchtpu::lowering {

using shlo::ElementType;
using shlo::TensorType;
using shlo::Value;

namespace {

double linear_filter(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution; a = -0.5 with antialias (Pillow's), -0.75 without (OpenCV's).
double cubic_filter(double x, double a) {
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// One dim's taps with int16 weights (as doubles) and their precision, following
// HelperInterpBase::_compute_index_ranges_int16_weights.
Taps u8_taps(int64_t in, int64_t out, bool cubic, bool antialias, bool align,
             std::optional<double> opt_scale, unsigned& precision) {
  double scale;
  if (align) {
    scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  } else if (opt_scale && *opt_scale > 0) {
    scale = 1.0 / *opt_scale;
  } else {
    scale = static_cast<double>(in) / static_cast<double>(out);
  }
  const int interp = cubic ? 4 : 2;
  auto filter = [&](double x) {
    return cubic ? cubic_filter(x, antialias ? -0.5 : -0.75) : linear_filter(x);
  };
  int64_t max_interp = interp;
  double support = interp * 0.5;
  if (antialias) {
    support = scale >= 1.0 ? (interp * 0.5) * scale : interp * 0.5;
    max_interp = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  }
  std::vector<std::vector<double>> w(static_cast<size_t>(out));
  std::vector<int64_t> xmin(static_cast<size_t>(out)), xsize(static_cast<size_t>(out));
  double wt_max = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    std::vector<double>& wi = w[static_cast<size_t>(i)];
    wi.assign(static_cast<size_t>(max_interp), 0.0);
    int64_t lo, size;
    if (antialias) {
      double center = scale * (static_cast<double>(i) + 0.5);
      double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
      lo = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
      size = std::min(static_cast<int64_t>(center + support + 0.5), in) - lo;
      size = std::clamp(size, int64_t{0}, max_interp);
      double total = 0.0;
      for (int64_t j = 0; j < size; ++j) {
        double v = filter((static_cast<double>(j + lo) - center + 0.5) * invscale);
        wi[static_cast<size_t>(j)] = v;
        total += v;
      }
      if (total != 0.0) {
        for (int64_t j = 0; j < size; ++j) {
          wi[static_cast<size_t>(j)] /= total;
          wt_max = std::max(wt_max, wi[static_cast<size_t>(j)]);
        }
      }
    } else {
      // _compute_indices_min_size_weights: the float path's clamped taps, with the weights of
      // taps beyond an edge accumulated onto the edge element.
      double real;
      if (align) {
        real = scale * static_cast<double>(i);
      } else {
        real = scale * (static_cast<double>(i) + 0.5) - 0.5;
        if (!cubic && real < 0) real = 0;
      }
      // guard_index_and_lambda floors through floorf.
      int64_t index = std::min(static_cast<int64_t>(std::floor(static_cast<float>(real))), in - 1);
      double lambda = std::min(std::max(real - static_cast<double>(index), 0.0), 1.0);
      const int64_t half = interp / 2;
      const int64_t unbound_min = index - half + 1, unbound_max = index + half + 1;
      lo = std::max(unbound_min, int64_t{0});
      size = std::clamp(std::min(unbound_max, in) - lo, int64_t{0}, max_interp);
      int64_t wk = 0;
      for (int64_t j = 0; j < max_interp; ++j) {
        wi[static_cast<size_t>(j)] = 0.0;
        double v = filter(static_cast<double>(j + 1 - half) - lambda);
        if (unbound_min + j <= 0) {
          wk = 0;
        } else if (unbound_min + j >= in - 1) {
          wk = size - 1;
        }
        wi[static_cast<size_t>(wk)] += v;
        wt_max = std::max(wt_max, wi[static_cast<size_t>(wk)]);
        ++wk;
      }
    }
    xmin[static_cast<size_t>(i)] = lo;
    xsize[static_cast<size_t>(i)] = size;
  }
  for (precision = 0; precision < 22; ++precision) {
    int next = static_cast<int>(0.5 + wt_max * (1 << (precision + 1)));
    if (next >= (1 << 15)) break;
  }
  Taps t(static_cast<size_t>(max_interp), in);
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < max_interp; ++j) {
      double v = w[static_cast<size_t>(i)][static_cast<size_t>(j)] * (1 << precision);
      auto q = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
      bool used = j < xsize[static_cast<size_t>(i)];
      t.add(static_cast<size_t>(j), used ? xmin[static_cast<size_t>(i)] + j : -1, used ? q : 0);
    }
  }
  return t;
}

}  // namespace

Value resample_u8(shlo::FunctionBuilder& b, Value x, const std::vector<int64_t>& out, bool cubic,
                  bool antialias, bool align_corners,
                  const std::vector<std::optional<double>>& scales) {
  Value v = b.convert(x, ElementType::kS32);
  const int64_t lead = x.rank() - 2;
  // The width (contiguous) pass first, then the height pass, each rounded to uint8.
  for (int64_t k = 1; k >= 0; --k) {
    int64_t dim = lead + k;
    int64_t in = x.shape()[static_cast<size_t>(dim)], o = out[static_cast<size_t>(dim)];
    if (in == o) continue;
    unsigned precision = 0;
    Taps taps =
        u8_taps(in, o, cubic, antialias, align_corners, scales[static_cast<size_t>(k)], precision);
    Value acc = taps.apply(b, v, dim);
    TensorType t = acc.type;
    acc = b.add(acc, b.constant_int(int64_t{1} << (precision - 1), t));
    acc = b.binary("stablehlo.shift_right_arithmetic", acc,
                   b.constant_int(static_cast<int64_t>(precision), t));
    v = b.clamp(b.constant_int(0, TensorType(ElementType::kS32, {})), acc,
                b.constant_int(255, TensorType(ElementType::kS32, {})));
  }
  return b.convert(v, ElementType::kU8);
}

}  // namespace torchtpu::lowering
