// Kernels around the fused optimizer lowerings (csrc/lowering/optim.cpp).
//  - The float-lr overloads (`Adam(lr=1e-3, fused=True)`) pass the learning rate as a `float`
//    attribute, which is structural in a program signature: an LR scheduler would recompile the
//    step every time lr changes. These kernels call the Tensor-lr overload with a CPU 0-d
//    tensor instead, which travels as a runtime scalar like any other, so a new lr compiles
//    nothing.
//  - The out= overloads (`_fused_adam.out`, `.tensor_lr_out`, and AdamW's and SGD's), which
//    otherwise took PyTorch's composite kernel (functional step, then one copy per list).
//  - Meta kernels for the fused in-place ops PyTorch ships none for; the eager executor infers
//    output types through them (they only check and return, as the CPU kernels write in place).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
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

// The out= forms, as PyTorch's generated kernels behave on the CPU: `out` receives the updated
// parameters and nothing else changes (self, grads and the optimizer state keep their values,
// although the schema marks them written). Here: `self` copied into `out`, the state lists
// cloned, then the lowered in-place step on those (no CPU round trip).
void params_into(const char* op, at::TensorList self, at::TensorList out) {
  TORCH_CHECK(out.size() == self.size(), op, ": expected ", self.size(),
              " tensors in out, but got ", out.size());
  for (size_t i = 0; i < self.size(); ++i) {
    at::native::resize_output(out[i], self[i].sizes());
    out[i].copy_(self[i]);
  }
}

std::vector<at::Tensor> cloned(at::TensorList list) {
  std::vector<at::Tensor> c;
  c.reserve(list.size());
  for (const at::Tensor& t : list) c.push_back(t.clone());
  return c;
}

template <bool kAdamW>
void fused_adam_out_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                              at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                              at::TensorList state_steps, const at::Tensor& lr, double beta1,
                              double beta2, double weight_decay, double eps, bool amsgrad,
                              bool maximize, const std::optional<at::Tensor>& grad_scale,
                              const std::optional<at::Tensor>& found_inf, at::TensorList out) {
  params_into(kAdamW ? "_fused_adamw.out" : "_fused_adam.out", self, out);
  auto g = cloned(grads), m = cloned(exp_avgs), v = cloned(exp_avg_sqs);
  auto vmax = cloned(max_exp_avg_sqs);
  if (kAdamW) {
    at::_fused_adamw_(out, g, m, v, vmax, state_steps, lr, beta1, beta2, weight_decay, eps, amsgrad,
                      maximize, grad_scale, found_inf);
  } else {
    at::_fused_adam_(out, g, m, v, vmax, state_steps, lr, beta1, beta2, weight_decay, eps, amsgrad,
                     maximize, grad_scale, found_inf);
  }
}

template <bool kAdamW>
void fused_adam_out(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                    at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                    at::TensorList state_steps, double lr, double beta1, double beta2,
                    double weight_decay, double eps, bool amsgrad, bool maximize,
                    const std::optional<at::Tensor>& grad_scale,
                    const std::optional<at::Tensor>& found_inf, at::TensorList out) {
  fused_adam_out_tensor_lr<kAdamW>(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                                   lr_tensor(lr), beta1, beta2, weight_decay, eps, amsgrad,
                                   maximize, grad_scale, found_inf, out);
}

void fused_sgd_out_tensor_lr(at::TensorList self, at::TensorList grads,
                             at::TensorList momentum_buffer_list, double weight_decay,
                             double momentum, const at::Tensor& lr, double dampening, bool nesterov,
                             bool maximize, bool is_first_step,
                             const std::optional<at::Tensor>& grad_scale,
                             const std::optional<at::Tensor>& found_inf, at::TensorList out) {
  params_into("_fused_sgd.out", self, out);
  at::_fused_sgd_(out, cloned(grads), cloned(momentum_buffer_list), weight_decay, momentum, lr,
                  dampening, nesterov, maximize, is_first_step, grad_scale, found_inf);
}

void fused_sgd_out(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
                   double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                   bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                   const std::optional<at::Tensor>& found_inf, at::TensorList out) {
  fused_sgd_out_tensor_lr(self, grads, momentum_buffer_list, weight_decay, momentum, lr_tensor(lr),
                          dampening, nesterov, maximize, is_first_step, grad_scale, found_inf, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adam_", &fused_adam_float_lr);
  m.impl("_fused_adamw_", &fused_adamw_float_lr);
  m.impl("_fused_sgd_", &fused_sgd_float_lr);
  m.impl("_fused_adam.out", &fused_adam_out<false>);
  m.impl("_fused_adam.tensor_lr_out", &fused_adam_out_tensor_lr<false>);
  m.impl("_fused_adamw.out", &fused_adam_out<true>);
  m.impl("_fused_adamw.tensor_lr_out", &fused_adam_out_tensor_lr<true>);
  m.impl("_fused_sgd.out", &fused_sgd_out);
  m.impl("_fused_sgd.tensor_lr_out", &fused_sgd_out_tensor_lr);
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
