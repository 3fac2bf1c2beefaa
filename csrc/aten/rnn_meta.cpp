// Meta kernels for the fused GRU cell ops (PyTorch ships Meta kernels for the LSTM ones only);
// the eager executor infers output types through them. Lowerings: csrc/lowering/rnn.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

std::tuple<at::Tensor, at::Tensor> gru_cell_meta(const at::Tensor& input_gates,
                                                 const at::Tensor& hidden_gates,
                                                 const at::Tensor& hx,
                                                 const std::optional<at::Tensor>& input_bias,
                                                 const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(hx.dim() == 2 && input_gates.dim() == 2,
              "_thnn_fused_gru_cell: expected 2-D "
              "gates and hidden state");
  const int64_t batch = hx.size(0), h = hx.size(1);
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes() && input_gates.size(0) == batch &&
                  input_gates.size(1) == 3 * h,
              "_thnn_fused_gru_cell: gates must be [batch, 3 * hidden_size]");
  for (const auto& bias : {input_bias, hidden_bias}) {
    if (bias && bias->defined()) {
      TORCH_CHECK(bias->dim() == 1 && bias->size(0) == 3 * h,
                  "_thnn_fused_gru_cell: biases must be [3 * hidden_size]");
    }
  }
  return {at::empty_like(hx, at::MemoryFormat::Contiguous),
          at::empty({batch, 5 * h}, input_gates.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward_meta(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(workspace.dim() == 2 && grad_hy.dim() == 2 &&
                  workspace.size(1) == 5 * grad_hy.size(1) && workspace.size(0) == grad_hy.size(0),
              "_thnn_fused_gru_cell_backward: workspace must be [batch, 5 * hidden_size]");
  const int64_t batch = grad_hy.size(0), h = grad_hy.size(1);
  auto opts = workspace.options();
  // CUDA leaves the bias gradients undefined without biases; empty tensors stand in for them.
  int64_t nb = has_bias ? 3 * h : 0;
  return {at::empty({batch, 3 * h}, opts), at::empty({batch, 3 * h}, opts),
          at::empty({batch, h}, opts), at::empty({nb}, opts), at::empty({nb}, opts)};
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", &gru_cell_meta);
  m.impl("_thnn_fused_gru_cell_backward", &gru_cell_backward_meta);
}

}  // namespace
}  // namespace torchtpu::aten
