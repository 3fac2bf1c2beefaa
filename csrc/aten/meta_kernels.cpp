// Meta kernels for ops torchtpu lowers but PyTorch ships without one (or with one that
// disagrees with the CPU kernel): the eager kernel types its program from them.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace torchtpu::aten {
namespace {

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };  // at::Reduction

// ---- ctc_loss (lowered in lowering/ctc.cpp) ----
// PyTorch has no meta kernel for the backward: the gradient has log_probs' shape and dtype.
at::Tensor ctc_backward_meta(const at::Tensor& grad, const at::Tensor& log_probs,
                             const at::Tensor& targets, at::IntArrayRef input_lengths,
                             at::IntArrayRef target_lengths, const at::Tensor& nll,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  return at::empty_like(log_probs, at::MemoryFormat::Contiguous);
}

at::Tensor ctc_backward_tensor_meta(const at::Tensor& grad, const at::Tensor& log_probs,
                                    const at::Tensor& targets, const at::Tensor& input_lengths,
                                    const at::Tensor& target_lengths, const at::Tensor& nll,
                                    const at::Tensor& log_alpha, int64_t blank,
                                    bool zero_infinity) {
  return at::empty_like(log_probs, at::MemoryFormat::Contiguous);
}

// ---- margin losses (lowered in lowering/loss_margin.cpp) ----
// PyTorch ships no meta kernels for the two backward ops: grad_input is shaped like self.
at::Tensor multi_margin_loss_backward_meta(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, const at::Scalar& p,
                                           const at::Scalar& margin,
                                           const std::optional<at::Tensor>& weight,
                                           int64_t reduction) {
  (void)grad_output, (void)target, (void)p, (void)margin, (void)weight, (void)reduction;
  return at::empty(self.sizes(), self.options().device(c10::kMeta));
}

at::Tensor multilabel_margin_loss_backward_meta(const at::Tensor& grad_output,
                                                const at::Tensor& self, const at::Tensor& target,
                                                int64_t reduction, const at::Tensor& is_target) {
  (void)grad_output, (void)target, (void)reduction, (void)is_target;
  return at::empty(self.sizes(), self.options().device(c10::kMeta));
}

// PyTorch's Python meta kernels (decompositions) give an unbatched input with reduction none a
// (1) result where the CPU kernel returns 0-d: these follow the CPU kernel.
at::Tensor multi_margin_loss_meta(const at::Tensor& self, const at::Tensor& target,
                                  const at::Scalar& p, const at::Scalar& margin,
                                  const std::optional<at::Tensor>& weight, int64_t reduction) {
  (void)p, (void)margin, (void)weight;
  auto opts = self.options().device(c10::kMeta);
  if (reduction == kNone && target.dim() > 0)
    return at::empty({self.dim() <= 1 ? 1 : self.size(0)}, opts);
  return at::empty({}, opts);
}

std::tuple<at::Tensor, at::Tensor> multilabel_margin_loss_forward_meta(const at::Tensor& self,
                                                                       const at::Tensor& target,
                                                                       int64_t reduction) {
  auto opts = self.options().device(c10::kMeta);
  at::Tensor out = (reduction == kNone && target.dim() > 1) ? at::empty({self.size(0)}, opts)
                                                            : at::empty({}, opts);
  return {out, at::empty(target.sizes(), opts)};
}

// ---- _logcumsumexp, geqrf, linalg_lstsq ----
// aten::_logcumsumexp (lowered in reduction.cpp) has no meta kernel in PyTorch; the eager
// kernel needs one for the result type: same shape and dtype as the input. The dim is checked
// here so a bad one raises the CPU's IndexError at the call, not a failed lowering.
at::Tensor logcumsumexp_meta(const at::Tensor& self, int64_t dim) {
  (void)c10::maybe_wrap_dim(dim, self.dim());
  return at::empty_like(self, self.options().device(c10::kMeta));
}

// Its out= form has none either, so torch.logcumsumexp(x, d, out=...) took the CPU fallback;
// with this one the generic out= path lowers _logcumsumexp and writes the result into `out` in
// the same program. Only the meta copy of `out` is resized here, silently: the eager kernel
// resizes the real one from it with the CPU's resize_output (and its warning). The CPU
// kernel writes self's dtype into out's memory whatever out's dtype is (a float64 out of a
// float32 input corrupts its heap), so a different dtype raises what the public
// logcumsumexp.out raises for it.
at::Tensor& logcumsumexp_out_meta(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  (void)c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "expected scalar_type ", self.scalar_type(),
              " but found ", out.scalar_type());
  if (out.sizes() != self.sizes()) out.resize_(self.sizes());
  return out;
}

// aten::geqrf (lowered in linalg_decomp.cpp) has no meta kernel either: (a, tau) with tau of
// batch x min(m, n).
std::tuple<at::Tensor, at::Tensor> geqrf_meta(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "geqrf: The input tensor A must have at least 2 dimensions.");
  std::vector<int64_t> tau_shape(self.sizes().begin(), self.sizes().end() - 2);
  tau_shape.push_back(std::min(self.size(-2), self.size(-1)));
  auto opts = self.options().device(c10::kMeta);
  return {at::empty_like(self, opts), at::empty(tau_shape, opts)};
}

// aten::linalg_lstsq (lowered in linalg_decomp.cpp) has no meta kernel: the shapes CPU
// returns for full-rank inputs (driver gelsy by default; residuals for m > n except gelsy;
// rank except gels; singular values for gelsd/gelss).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> lstsq_meta(
    const at::Tensor& self, const at::Tensor& b, std::optional<double> rcond,
    std::optional<c10::string_view> driver) {
  (void)rcond;
  bool vector = b.dim() == self.dim() - 1 && b.sizes() == self.sizes().slice(0, self.dim() - 1);
  TORCH_CHECK_NOT_IMPLEMENTED(self.dim() >= 2 && b.dim() >= 2 && !vector,
                              "torchtpu: linalg_lstsq meta: matrix right-hand sides only");
  std::string drv = driver ? std::string(*driver) : "gelsy";
  int64_t m = self.size(-2), n = self.size(-1), k = b.size(-1);
  std::vector<int64_t> batch =
      at::infer_size(self.sizes().slice(0, self.dim() - 2), b.sizes().slice(0, b.dim() - 2));
  auto opts = self.options().device(c10::kMeta);
  auto with = [&](std::vector<int64_t> tail) {
    std::vector<int64_t> s = batch;
    s.insert(s.end(), tail.begin(), tail.end());
    return s;
  };
  at::Tensor sol = at::empty(with({n, k}), opts);
  at::Tensor res = (m > n && drv != "gelsy") ? at::empty(with({k}), opts) : at::empty({0}, opts);
  at::Tensor rank = drv != "gels" ? at::empty(with({}), opts.dtype(at::kLong))
                                  : at::empty({0}, opts.dtype(at::kLong));
  at::Tensor sv = (drv == "gelsd" || drv == "gelss") ? at::empty(with({std::min(m, n)}), opts)
                                                     : at::empty({0}, opts);
  return {sol, res, rank, sv};
}

// ---- fractional max pooling (lowered in lowering/pooling_fractional.cpp) ----
// PyTorch has no meta kernel for the 3d backward (the 2d one is structured): the gradient has
// self's shape and dtype.
at::Tensor fractional_max_pool3d_backward_meta(const at::Tensor& grad_output,
                                               const at::Tensor& self, at::IntArrayRef,
                                               at::IntArrayRef, const at::Tensor&) {
  return at::empty_like(self, at::MemoryFormat::Contiguous);
}

// _sample_dirichlet (torch.distributions.Dirichlet/Beta on tpu, lowered in lowering/random.cpp):
// one sample per alpha, of alpha's shape and dtype.
at::Tensor sample_dirichlet_meta(const at::Tensor& alpha, std::optional<at::Generator> gen) {
  (void)gen;
  return at::empty_like(alpha, at::MemoryFormat::Contiguous);
}

// binomial(count, prob) (lowered in lowering/random.cpp): one draw per count, prob broadcast to
// count's shape as the CPU's kernel does.
at::Tensor binomial_meta(const at::Tensor& count, const at::Tensor& prob,
                         std::optional<at::Generator> gen) {
  (void)gen;
  (void)prob;
  return at::empty_like(count, at::MemoryFormat::Contiguous);
}

// _grid_sampler_2d_cpu_fallback (lowered as grid_sampler_2d in lowering/grid_sample.cpp): PyTorch's
// only kernel for it is CompositeExplicitAutograd and reads memory, so meta tensors had none.
// (N, C, H, W) input and (N, H_out, W_out, 2) grid give (N, C, H_out, W_out), as the CPU's.
at::Tensor grid_sampler_2d_cpu_fallback_meta(const at::Tensor& input, const at::Tensor& grid,
                                             int64_t, int64_t, bool) {
  TORCH_CHECK(input.dim() == 4 && grid.dim() == 4 && grid.size(3) == 2,
              "_grid_sampler_2d_cpu_fallback: expected a 4-D input and a (N, H, W, 2) grid, got ",
              input.sizes(), " and ", grid.sizes());
  return at::empty({input.size(0), input.size(1), grid.size(1), grid.size(2)},
                   input.options().device(c10::kMeta));
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_2d_cpu_fallback_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid, int64_t,
    int64_t, bool) {
  (void)grad_output;
  return {at::empty_like(input, at::MemoryFormat::Contiguous),
          at::empty_like(grid, at::MemoryFormat::Contiguous)};
}

// convolution_overrideable (lowered as aten::convolution, lowering/conv.cpp), where
// aten::_convolution sends tpu tensors: its only kernel is CompositeExplicitAutograd's "not
// implemented", so meta tensors had none. It is aten::convolution with the same arguments.
at::Tensor convolution_overrideable_meta(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias,
                                         c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                                         c10::SymIntArrayRef dilation, bool transposed,
                                         c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::convolution_symint(input, weight, bias, stride, padding, dilation, transposed,
                                output_padding, std::move(groups));
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable_meta));
  m.impl("_grid_sampler_2d_cpu_fallback", TORCH_FN(grid_sampler_2d_cpu_fallback_meta));
  m.impl("_grid_sampler_2d_cpu_fallback_backward",
         TORCH_FN(grid_sampler_2d_cpu_fallback_backward_meta));
  m.impl("_sample_dirichlet", TORCH_FN(sample_dirichlet_meta));
  m.impl("binomial", TORCH_FN(binomial_meta));
  m.impl("_ctc_loss_backward", &ctc_backward_meta);
  m.impl("_ctc_loss_backward.Tensor", &ctc_backward_tensor_meta);
  m.impl("multi_margin_loss", TORCH_FN(multi_margin_loss_meta));
  m.impl("multilabel_margin_loss_forward", TORCH_FN(multilabel_margin_loss_forward_meta));
  m.impl("multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward_meta));
  m.impl("multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward_meta));
  m.impl("linalg_lstsq", TORCH_FN(lstsq_meta));
  m.impl("_logcumsumexp", TORCH_FN(logcumsumexp_meta));
  m.impl("_logcumsumexp.out", TORCH_FN(logcumsumexp_out_meta));
  m.impl("geqrf", TORCH_FN(geqrf_meta));
  m.impl("fractional_max_pool3d_backward", &fractional_max_pool3d_backward_meta);
}

}  // namespace
}  // namespace torchtpu::aten
