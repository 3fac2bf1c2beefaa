// Kernels around the fused optimizer lowerings (csrc/lowering/optim.cpp).
//  - The float-lr overloads (`Adam(lr=1e-3, fused=True)`) pass the learning rate as a `float`
//    attribute, which is structural in a program signature: an LR scheduler would recompile the
//    step every time lr changes. These kernels call the Tensor-lr overload with a CPU 0-d
//    tensor instead, which travels as a runtime scalar like any other, so a new lr compiles
//    nothing.
//  - Meta kernels for the fused in-place ops PyTorch ships none for; the eager executor infers
//    output types through them (they only check and return, as the CPU kernels write in place).
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

at::Tensor lr_tensor(double lr) {
  return at::scalar_tensor(lr, at::TensorOptions().dtype(at::kFloat));
}

void fused_adam_float_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                         at::TensorList state_steps, double lr, double beta1, double beta2,
                         double weight_decay, double eps, bool amsgrad, bool maximize,
                         const std::optional<at::Tensor>& grad_scale,
                         const std::optional<at::Tensor>& found_inf) {
  at::_fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr_tensor(lr),
                   beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

void fused_adamw_float_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                          at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                          at::TensorList state_steps, double lr, double beta1, double beta2,
                          double weight_decay, double eps, bool amsgrad, bool maximize,
                          const std::optional<at::Tensor>& grad_scale,
                          const std::optional<at::Tensor>& found_inf) {
  at::_fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr_tensor(lr),
                    beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

void fused_sgd_float_lr(at::TensorList self, at::TensorList grads,
                        at::TensorList momentum_buffer_list, double weight_decay, double momentum,
                        double lr, double dampening, bool nesterov, bool maximize,
                        bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                        const std::optional<at::Tensor>& found_inf) {
  at::_fused_sgd_(self, grads, momentum_buffer_list, weight_decay, momentum, lr_tensor(lr),
                  dampening, nesterov, maximize, is_first_step, grad_scale, found_inf);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adam_", &fused_adam_float_lr);
  m.impl("_fused_adamw_", &fused_adamw_float_lr);
  m.impl("_fused_sgd_", &fused_sgd_float_lr);
}

void check_same_length(const char* op, at::TensorList a, at::TensorList b) {
  TORCH_CHECK(a.size() == b.size(), op, ": tensor lists must have the same length");
}

void adam_meta(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
               at::TensorList exp_avg_sqs, at::TensorList, at::TensorList state_steps,
               const at::Tensor&, double, double, double, double, bool, bool,
               const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {
  check_same_length("_fused_adam_", self, grads);
  check_same_length("_fused_adam_", self, exp_avgs);
  check_same_length("_fused_adam_", self, exp_avg_sqs);
  check_same_length("_fused_adam_", self, state_steps);
}

void sgd_meta_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList, double, double,
                        const at::Tensor&, double, bool, bool, bool,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {
  check_same_length("_fused_sgd_", self, grads);
}

void sgd_meta(at::TensorList self, at::TensorList grads, at::TensorList, double, double, double,
              double, bool, bool, bool, const std::optional<at::Tensor>&,
              const std::optional<at::Tensor>&) {
  check_same_length("_fused_sgd_", self, grads);
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_fused_adam_.tensor_lr", &adam_meta);
  m.impl("_fused_adamw_.tensor_lr", &adam_meta);
  m.impl("_fused_sgd_", &sgd_meta);
  m.impl("_fused_sgd_.tensor_lr", &sgd_meta_tensor_lr);
}

}  // namespace
}  // namespace torchtpu::aten
