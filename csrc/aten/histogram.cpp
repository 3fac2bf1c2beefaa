// torch.histogram and torch.histogramdd on tpu. Bin edges given as tensors need no sync; edges
// given as counts need the outer edges: the `range` argument, else the data's min and max per
// dimension, which the host reads once (as the CPU kernel does) to check and widen them. The
// counting itself is one static program, torchtpu::histogram_from_edges (lowered in
// lowering/histogram.cpp).
#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/stack.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def(
      "histogram_from_edges(Tensor self, Tensor[] edges, Tensor? weight, bool density) -> Tensor");
}

at::Tensor histogram_from_edges_meta(const at::Tensor& self, at::TensorList edges,
                                     const std::optional<at::Tensor>&, bool) {
  std::vector<int64_t> sizes;
  for (const at::Tensor& e : edges) sizes.push_back(e.numel() - 1);
  return at::empty(sizes, self.options());
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) { m.impl("histogram_from_edges", histogram_from_edges_meta); }

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("histogram_from_edges", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

// The CPU's histogramdd_check_inputs for input (M, N) and its edges.
void check_inputs(const at::Tensor& input, at::TensorList bins,
                  const std::optional<at::Tensor>& weight) {
  int64_t n = input.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bins.size()) == n, "torch.histogramdd: expected ", n,
              " sequences of bin edges for a ", n, "-dimensional histogram but got ", bins.size());
  for (size_t d = 0; d < bins.size(); ++d) {
    TORCH_CHECK(input.dtype() == bins[d].dtype(),
                "torch.histogramdd: input tensor and bins tensors should have the same dtype, but "
                "got input with dtype ",
                input.dtype(), " and bins for dimension ", d, " with dtype ", bins[d].dtype());
    TORCH_CHECK(bins[d].dim() == 1,
                "torch.histogramdd: bins tensor should have one dimension, but got ", bins[d].dim(),
                " dimensions in the bins tensor for dimension ", d);
    TORCH_CHECK(bins[d].numel() > 0,
                "torch.histogramdd: bins tensor should have at least 1 element, but got ",
                bins[d].numel(), " elements in the bins tensor for dimension ", d);
  }
  if (weight) {
    TORCH_CHECK(input.dtype() == weight->dtype(),
                "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor "
                "should have the same dtype, but got input(",
                input.dtype(), "), and weight(", weight->dtype(), ")");
    // Compared as views of the shapes: copying them into vectors and reassigning one from
    // an initializer list made GCC 12 warn (-Wfree-nonheap-object, a false positive).
    c10::IntArrayRef in_sizes = input.sizes().slice(0, input.dim() - 1);
    c10::IntArrayRef w_sizes = weight->sizes();
    const int64_t scalar_shape[] = {1};  // a 0-d weight counts as shape [1], as on the CPU
    if (w_sizes.empty()) w_sizes = scalar_shape;
    TORCH_CHECK(in_sizes.equals(w_sizes),
                "torch.histogramdd: if weight tensor is provided it should have the same shape as "
                "the input tensor excluding its innermost dimension, but got input with shape ",
                input.sizes(), " and weight with shape ", weight->sizes());
  }
}

at::Tensor from_edges(const at::Tensor& input, at::TensorList edges,
                      const std::optional<at::Tensor>& weight, bool density) {
  TORCH_CHECK(at::isFloatingType(input.scalar_type()),
              "torch.histogram: input tensor should be floating point, but got ", input.dtype());
  check_inputs(input, edges, weight);
  int64_t n = input.size(-1);
  at::Tensor x = input.reshape({-1, n});
  std::optional<at::Tensor> w;
  if (weight) w = weight->reshape({x.size(0)});
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchtpu::histogram_from_edges", "")
                       .typed<at::Tensor(const at::Tensor&, at::TensorList,
                                         const std::optional<at::Tensor>&, bool)>();
  return op.call(x, edges, w, density);
}

// The CPU's select_outer_bin_edges + linspace: the edges for `bin_ct` bins per dimension.
std::vector<at::Tensor> bin_edges(const at::Tensor& self, at::IntArrayRef bin_ct,
                                  std::optional<at::ArrayRef<double>> range) {
  TORCH_CHECK(self.dim() >= 1, "torch.histogramdd: input tensor should have at least 1 dimension");
  int64_t n = self.size(-1);
  std::vector<double> left(n, 0.), right(n, 1.);
  if (range) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * n, "torch.histogramdd: for a ", n,
                "-dimensional histogram range should have ", 2 * n, " elements, but got ",
                range->size());
    for (int64_t d = 0; d < n; ++d) {
      left[d] = (*range)[2 * d];
      right[d] = (*range)[2 * d + 1];
    }
  } else if (self.numel() > 0) {
    // The CPU infers edges for float and double only.
    TORCH_CHECK_NOT_IMPLEMENTED(
        self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
        "\"histogramdd\" not implemented for '", c10::toString(self.scalar_type()), "'");
    auto [mn, mx] = at::aminmax(self.reshape({-1, n}), 0);
    at::Tensor host = at::stack({mn, mx}).to(at::kDouble).cpu();  // the one sync
    auto a = host.accessor<double, 2>();
    for (int64_t d = 0; d < n; ++d) {
      left[d] = a[0][d];
      right[d] = a[1][d];
    }
  }
  std::vector<at::Tensor> edges;
  for (int64_t d = 0; d < n; ++d) {
    TORCH_CHECK(std::isfinite(left[d]) && std::isfinite(right[d]), "torch.histogramdd: dimension ",
                d, "'s range [", left[d], ", ", right[d], "] is not finite");
    TORCH_CHECK(left[d] <= right[d], "torch.histogramdd: min should not exceed max, but got min ",
                left[d], " max ", right[d], " for dimension ", d);
    if (left[d] == right[d]) {
      left[d] -= 0.5;
      right[d] += 0.5;
    }
    TORCH_CHECK(bin_ct[d] > 0, "torch.histogram(): bins must be > 0, but got ", bin_ct[d],
                " for dimension ", d);
    edges.push_back(at::linspace(left[d], right[d], bin_ct[d] + 1, self.options()));
  }
  return edges;
}

std::tuple<at::Tensor, at::Tensor> histogram_bins_tensor(const at::Tensor& self,
                                                         const at::Tensor& bins,
                                                         const std::optional<at::Tensor>& weight,
                                                         bool density) {
  TORCH_CHECK(bins.dim() == 1, "histogram(): bins tensor should have 1 dimension, but got ",
              bins.dim(), " dimensions");
  at::Tensor hist = from_edges(self.reshape({-1, 1}), {bins}, weight, density);
  return {hist, bins.clone()};
}

std::tuple<at::Tensor, at::Tensor> histogram_bin_ct(const at::Tensor& self, int64_t bins,
                                                    std::optional<at::ArrayRef<double>> range,
                                                    const std::optional<at::Tensor>& weight,
                                                    bool density) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "torch.histogram: input tensor should be floating point, but got ", self.dtype());
  at::Tensor x = self.reshape({-1, 1});
  std::vector<at::Tensor> edges = bin_edges(x, {bins}, range);
  return {from_edges(x, edges, weight, density), edges[0]};
}

std::vector<at::Tensor> histogramdd_bin_edges(const at::Tensor& self, at::IntArrayRef bins,
                                              std::optional<at::ArrayRef<double>> range,
                                              const std::optional<at::Tensor>&, bool) {
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  return bin_edges(self, bins, range);
}

at::Tensor histogramdd_from_bin_cts(const at::Tensor& self, at::IntArrayRef bins,
                                    std::optional<at::ArrayRef<double>> range,
                                    const std::optional<at::Tensor>& weight, bool density) {
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  return from_edges(self, bin_edges(self, bins, range), weight, density);
}

at::Tensor histogramdd_from_bin_tensors(const at::Tensor& self, at::TensorList bins,
                                        const std::optional<at::Tensor>& weight, bool density) {
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions");
  return from_edges(self, bins, weight, density);
}

void write_back(const at::Tensor& r, at::Tensor& out) {
  out.resize_(r.sizes());
  out.copy_(r);
}

std::tuple<at::Tensor&, at::Tensor&> histogram_bins_tensor_out(
    const at::Tensor& self, const at::Tensor& bins, const std::optional<at::Tensor>& weight,
    bool density, at::Tensor& hist, at::Tensor& bin_edges) {
  auto [h, e] = histogram_bins_tensor(self, bins, weight, density);
  write_back(h, hist);
  write_back(e, bin_edges);
  return {hist, bin_edges};
}

std::tuple<at::Tensor&, at::Tensor&> histogram_bin_ct_out(const at::Tensor& self, int64_t bins,
                                                          std::optional<at::ArrayRef<double>> range,
                                                          const std::optional<at::Tensor>& weight,
                                                          bool density, at::Tensor& hist,
                                                          at::Tensor& bin_edges) {
  auto [h, e] = histogram_bin_ct(self, bins, range, weight, density);
  write_back(h, hist);
  write_back(e, bin_edges);
  return {hist, bin_edges};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histogram.bins_tensor_out", histogram_bins_tensor_out);
  m.impl("histogram.bin_ct_out", histogram_bin_ct_out);
  m.impl("histogram.bins_tensor", histogram_bins_tensor);
  m.impl("histogram.bin_ct", histogram_bin_ct);
  m.impl("_histogramdd_bin_edges", histogramdd_bin_edges);
  m.impl("_histogramdd_from_bin_cts", histogramdd_from_bin_cts);
  m.impl("_histogramdd_from_bin_tensors", histogramdd_from_bin_tensors);
}

}  // namespace
}  // namespace torchtpu::aten
