// Batch norm's statistics: native_batch_norm updates running_mean/running_var in place while
// also returning fresh tensors (without saying so in its schema), and _native_batch_norm_legit /
// _batch_norm_with_update do it by schema. The tpu kernels run the functional forms (lowered in
// lowering/normalization.cpp) and copy the new statistics back into the caller's tensors.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "aten/boxed_kernel.h"
#include "aten/out_via_functional.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

void native_batch_norm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  std::optional<at::Tensor> running_mean = s[first + 3].toOptional<at::Tensor>();
  std::optional<at::Tensor> running_var = s[first + 4].toOptional<at::Tensor>();
  bool training = s[first + 5].toBool();
  if (!training) {
    // Like the CPU kernel, evaluation returns empty save_mean/save_invstd (the backward reads
    // the running statistics instead).
    tpu_boxed_kernel(op, stack);
    for (size_t i = s.size() - 2; i < s.size(); ++i) {
      s[i] = at::empty({0}, s[i].toTensor().options());
    }
    return;
  }
  if (!running_mean || !running_mean->defined() || !running_var || !running_var->defined()) {
    return tpu_boxed_kernel(op, stack);
  }
  auto r = at::_native_batch_norm_legit_functional(
      s[first].toTensor(), s[first + 1].toOptional<at::Tensor>(),
      s[first + 2].toOptional<at::Tensor>(), *running_mean, *running_var, true,
      s[first + 6].toDouble(), s[first + 7].toDouble());
  running_mean->copy_(std::get<3>(r));
  running_var->copy_(std::get<4>(r));
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
  s.emplace_back(std::get<0>(r));
  s.emplace_back(std::get<1>(r));
  s.emplace_back(std::get<2>(r));
}

// The functional evaluation forms: _native_batch_norm_legit_no_training,
// _native_batch_norm_legit_functional(training=False) and _batch_norm_no_update with running
// statistics return empty save_mean/save_invstd on the CPU (outputs 1 and 2), as
// native_batch_norm does above; PyTorch's meta functions give them CUDA's [C] shape instead (a
// difference torch/_decomp notes). The backward of evaluation reads the running statistics.
void batch_norm_eval_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const auto& schema = op.schema();
  const size_t first = s.size() - schema.arguments().size();
  bool eval = true;
  if (schema.name() == "aten::_native_batch_norm_legit_functional") {
    eval = !s[first + 5].toBool();
  } else if (schema.name() == "aten::_batch_norm_no_update") {
    eval = s[first + 3].toOptional<at::Tensor>().has_value() &&
           s[first + 4].toOptional<at::Tensor>().has_value();
  }
  tpu_boxed_kernel(op, stack);
  if (!eval) return;
  const size_t out = s.size() - schema.returns().size();
  for (size_t i = out + 1; i < out + 3; ++i) {
    s[i] = at::empty({0}, s[i].toTensor().options());
  }
}

// _native_batch_norm_legit(input, weight, bias, running_mean(a!), running_var(b!), training,
// momentum, eps) and _batch_norm_with_update(input, weight, bias, running_mean(a!),
// running_var(b!), momentum, eps) update the statistics in place and return fresh tensors:
// their functional forms return both, and the statistics are copied back.
void batch_norm_update_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  bool legit = op.schema().name() == "aten::_native_batch_norm_legit";
  at::Tensor input = s[first].toTensor();
  auto weight = s[first + 1].toOptional<at::Tensor>();
  auto bias = s[first + 2].toOptional<at::Tensor>();
  at::Tensor running_mean = s[first + 3].toTensor();
  at::Tensor running_var = s[first + 4].toTensor();
  bool training = legit ? s[first + 5].toBool() : true;
  double momentum = s[first + (legit ? 6 : 5)].toDouble();
  double eps = s[first + (legit ? 7 : 6)].toDouble();
  std::vector<at::Tensor> outs;
  if (legit && !training) {
    auto r = at::_native_batch_norm_legit_no_training(input, weight, bias, running_mean,
                                                      running_var, momentum, eps);
    // Evaluation returns empty save_mean/save_invstd, like the CPU kernel.
    outs = {std::get<0>(r), at::empty({0}, std::get<1>(r).options()),
            at::empty({0}, std::get<2>(r).options())};
  } else if (legit) {
    auto r = at::_native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
                                                     true, momentum, eps);
    running_mean.copy_(std::get<3>(r));
    running_var.copy_(std::get<4>(r));
    outs = {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
  } else {
    auto r = at::_batch_norm_with_update_functional(input, weight, bias, running_mean, running_var,
                                                    momentum, eps);
    running_mean.copy_(std::get<4>(r));
    running_var.copy_(std::get<5>(r));
    outs = {std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)};
  }
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
  for (at::Tensor& t : outs) s.emplace_back(std::move(t));
}

// The out= forms (_batch_norm_with_update.out, _native_batch_norm_legit.out / .no_stats_out,
// native_batch_norm.out):
// the functional kernels compute (statistics copied back as above), and the results go into
// out/save_mean/save_invstd, resized like the CPU's resize_output. `reserve` (cuDNN's workspace)
// is left as the CPU leaves it: untouched; so are save_mean/save_invstd (their shape included)
// of _native_batch_norm_legit.out in evaluation.
void batch_norm_out_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const bool no_stats = schema.overload_name() == "no_stats_out";
  // native_batch_norm.out has the same (..., training, ...) arguments and leaves the stats
  // outputs alone in evaluation, as the CPU's batch_norm_cpu_out does.
  const bool legit_stats = (schema.name() == "aten::_native_batch_norm_legit" && !no_stats) ||
                           schema.name() == "aten::native_batch_norm";
  // (input, weight, bias, running_mean, running_var, training, ...) for the latter.
  const size_t first = stack->size() - schema.arguments().size();
  const bool eval = legit_stats && !(*stack)[first + 5].toBool();
  auto functional = c10::Dispatcher::singleton().findSchemaOrThrow(schema.name().c_str(),
                                                                   no_stats ? "no_stats" : "");
  write_outs_via(op, stack, functional, eval ? 1 : 3);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* out_form : {"_batch_norm_with_update.out", "_native_batch_norm_legit.out",
                               "_native_batch_norm_legit.no_stats_out", "native_batch_norm.out"}) {
    m.impl(out_form, torch::CppFunction::makeFromBoxedFunction<&batch_norm_out_kernel>());
  }
  m.impl("native_batch_norm",
         torch::CppFunction::makeFromBoxedFunction<&native_batch_norm_kernel>());
  m.impl("_native_batch_norm_legit",
         torch::CppFunction::makeFromBoxedFunction<&batch_norm_update_kernel>());
  m.impl("_batch_norm_with_update",
         torch::CppFunction::makeFromBoxedFunction<&batch_norm_update_kernel>());
  for (const char* eval_form : {"_native_batch_norm_legit_no_training",
                                "_native_batch_norm_legit_functional", "_batch_norm_no_update"}) {
    m.impl(eval_form, torch::CppFunction::makeFromBoxedFunction<&batch_norm_eval_kernel>());
  }
}

}  // namespace
}  // namespace torchtpu::aten
