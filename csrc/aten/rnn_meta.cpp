// Meta kernels for the fused GRU cell ops (PyTorch ships Meta kernels for the LSTM ones only);
// the eager executor infers output types through them. Lowerings: csrc/lowering/rnn.cpp.
// nn.LSTM(bias=False): PyTorch's meta kernel of _thnn_fused_lstm_cell fails on absent biases,
// and the backward's returns None for the bias gradient; the tpu kernels below run the lowered
// ops with zero biases (has_bias=True) and drop that gradient again.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

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

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  bool has_bias = input_bias && input_bias->defined();
  at::Tensor zero =
      has_bias ? at::Tensor() : at::zeros({input_gates.size(1)}, input_gates.options());
  torch::jit::Stack s{input_gates, hidden_gates, cx, has_bias ? *input_bias : zero,
                      has_bias && hidden_bias && hidden_bias->defined() ? *hidden_bias : zero};
  run_lowered_by_name("aten::_thnn_fused_lstm_cell", "", &s);
  return {s[0].toTensor(), s[1].toTensor(), s[2].toTensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  bool any = (grad_hy && grad_hy->defined()) || (grad_cy && grad_cy->defined());
  if (!any) return {};
  torch::jit::Stack s{grad_hy, grad_cy, cx, cy, workspace, true};
  run_lowered_by_name("aten::_thnn_fused_lstm_cell_backward_impl", "", &s);
  return {s[0].toTensor(), s[1].toTensor(), has_bias ? s[2].toTensor() : at::Tensor()};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", &lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", &lstm_cell_backward_impl);
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_thnn_fused_gru_cell", &gru_cell_meta);
  m.impl("_thnn_fused_gru_cell_backward", &gru_cell_backward_meta);
}

}  // namespace
}  // namespace torchtpu::aten
