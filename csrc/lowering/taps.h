// Sparse resampling along one dim: out[i] = sum_k w[k][i] * x[idx[k][i]] over the taps output
// i reads. Upsampling, antialiased resampling, adaptive average pooling and edge padding (and
// their backwards, through `transposed()`) share it. Only the taps an output reads enter its
// sum, as in the CPU kernels: a dense (out, in) matrix would multiply every other element by a
// zero weight, and 0 * inf = NaN would spread one non-finite value over the whole dim.
#pragma once

#include <cstdint>
#include <vector>

#include "stablehlo/builder.h"

namespace torchtpu::lowering {

struct Taps {
  // idx[k][i]: the input output i reads at tap k (-1: no tap); w[k][i] its weight. No weights
  // at all means a plain copy of x[idx[0][i]] (nearest modes, padding).
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<double>> w;
  int64_t in = 0;

  explicit Taps(size_t k = 1, int64_t in_size = 0) : idx(k), in(in_size) {}

  void add(size_t k, int64_t index, double weight);
  int64_t out() const { return idx.empty() ? 0 : static_cast<int64_t>(idx[0].size()); }

  // x resampled along `dim` (its size `in` becomes out()), summed in tap order in x's dtype.
  shlo::Value apply(shlo::FunctionBuilder& b, shlo::Value x, int64_t dim) const;
  // The adjoint: input j collects w * g[i] from every output i that read it (in order of i).
  Taps transposed() const;
};

// A dense constant of element type `t` (float or integer) from row-major `v`.
shlo::Value dense_values(shlo::FunctionBuilder& b, const std::vector<double>& v,
                         const std::vector<int64_t>& shape, shlo::ElementType t);

}  // namespace torchtpu::lowering
