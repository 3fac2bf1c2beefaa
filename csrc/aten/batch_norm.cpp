// Batch norm's statistics: native_batch_norm updates running_mean/running_var in place while
// also returning fresh tensors (without saying so in its schema), and _native_batch_norm_legit /
// _batch_norm_with_update do it by schema. The tpu kernels of every form run one op,
// torchtpu::batch_norm (lowered in lowering/normalization.cpp), and copy the new statistics back
// into the caller's tensors.
//
// torchtpu::batch_norm exists for its meta kernel: its statistics take the CPU's dtypes. The CPU
// returns save_mean/save_invstd and the new running statistics in the input's dtype (bfloat16
// for a bfloat16 input and parameters) unless the parameters are float32 ("mixed"), where
// PyTorch's meta kernels, and CUDA, give float32 for every half-precision input; tpu returned
// float32 (issue 32). Compiled graphs keep the meta kernels' dtypes, as their fake tensors do.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "aten/boxed_kernel.h"
#include "aten/out_via_functional.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

using BatchNormResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using OptTensor = std::optional<at::Tensor>;

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def(
      "batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, "
      "Tensor? running_var, bool training, float momentum, float eps) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor)");
}

// The CPU's statistics dtype (batch_norm_cpu's param_scalar_type) after its mixed-dtype checks
// (mixed_data_type.h): parameters of another dtype than the input ("mixed") must be float32 and
// the input half-precision, and the statistics are then float32; else the input's dtype.
at::ScalarType cpu_stats_dtype(const at::Tensor& input, std::initializer_list<OptTensor> params) {
  const at::ScalarType t = input.scalar_type();
  bool mixed = false;
  for (const OptTensor& p : params) mixed |= p && p->defined() && p->scalar_type() != t;
  if (!mixed) return t;
  for (const OptTensor& p : params) {
    TORCH_CHECK(!p || !p->defined() || p->scalar_type() == at::kFloat,
                "mixed dtype (CPU): expect parameter to have scalar type of Float");
  }
  TORCH_CHECK(t == at::kBFloat16 || t == at::kHalf,
              "mixed dtype (CPU): all inputs must share same datatype.");
  return at::kFloat;
}

BatchNormResult batch_norm_meta(const at::Tensor& input, const OptTensor& weight,
                                const OptTensor& bias, const OptTensor& running_mean,
                                const OptTensor& running_var, bool training, double momentum,
                                double eps) {
  (void)training, (void)momentum, (void)eps;
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dims, got ",
              input.dim());
  const auto opts = input.options()
                        .device(c10::kMeta)
                        .dtype(cpu_stats_dtype(input, {weight, bias, running_mean, running_var}));
  const int64_t c = input.size(1);
  const int64_t n_running = running_mean && running_mean->defined() ? c : 0;
  return {at::empty_like(input, input.suggest_memory_format()), at::empty({c}, opts),
          at::empty({c}, opts), at::empty({n_running}, opts), at::empty({n_running}, opts)};
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) { m.impl("batch_norm", TORCH_FN(batch_norm_meta)); }

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("batch_norm", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

BatchNormResult run_batch_norm(const at::Tensor& input, const OptTensor& weight,
                               const OptTensor& bias, const OptTensor& running_mean,
                               const OptTensor& running_var, bool training, double momentum,
                               double eps) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchtpu::batch_norm", "")
          .typed<BatchNormResult(const at::Tensor&, const OptTensor&, const OptTensor&,
                                 const OptTensor&, const OptTensor&, bool, double, double)>();
  return op.call(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

bool defined(const OptTensor& t) { return t && t->defined(); }

// Like the CPU kernels, evaluation returns empty save_mean/save_invstd (the backward reads the
// running statistics instead), of the statistics' dtype.
at::Tensor empty_stat(const at::Tensor& like) { return at::empty({0}, like.options()); }

// cuDNN's workspace in the _batch_norm_with_update family: empty uint8 on the CPU.
at::Tensor empty_reserve(const at::Tensor& input) {
  return at::empty({0}, input.options().dtype(at::kByte));
}

void replace_args(torch::jit::Stack& s, size_t first, std::vector<at::Tensor> outs) {
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
  for (at::Tensor& t : outs) s.emplace_back(std::move(t));
}

// native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps) and
// _native_batch_norm_legit(input, weight, bias, running_mean(a!), running_var(b!), training,
// momentum, eps): training updates the running statistics in place.
void native_batch_norm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  OptTensor running_mean = s[first + 3].toOptional<at::Tensor>();
  OptTensor running_var = s[first + 4].toOptional<at::Tensor>();
  const bool training = s[first + 5].toBool();
  auto [out, mean, invstd, new_mean, new_var] =
      run_batch_norm(s[first].toTensor(), s[first + 1].toOptional<at::Tensor>(),
                     s[first + 2].toOptional<at::Tensor>(), running_mean, running_var, training,
                     s[first + 6].toDouble(), s[first + 7].toDouble());
  if (!training) {
    replace_args(s, first, {out, empty_stat(mean), empty_stat(invstd)});
    return;
  }
  if (defined(running_mean) && defined(running_var)) {
    running_mean->copy_(new_mean);
    running_var->copy_(new_var);
  }
  replace_args(s, first, {out, mean, invstd});
}

// _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
void batch_norm_no_stats_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  auto [out, mean, invstd, unused_mean, unused_var] =
      run_batch_norm(s[first].toTensor(), s[first + 1].toOptional<at::Tensor>(),
                     s[first + 2].toOptional<at::Tensor>(), std::nullopt, std::nullopt,
                     s[first + 3].toBool(), s[first + 4].toDouble(), s[first + 5].toDouble());
  replace_args(s, first, {out, mean, invstd});
}

// _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training,
// momentum, eps) -> (out, save_mean, save_invstd, running_mean_out, running_var_out)
void batch_norm_functional_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  const bool training = s[first + 5].toBool();
  auto [out, mean, invstd, new_mean, new_var] = run_batch_norm(
      s[first].toTensor(), s[first + 1].toOptional<at::Tensor>(),
      s[first + 2].toOptional<at::Tensor>(), s[first + 3].toTensor(), s[first + 4].toTensor(),
      training, s[first + 6].toDouble(), s[first + 7].toDouble());
  if (!training) {
    mean = empty_stat(mean);
    invstd = empty_stat(invstd);
  }
  replace_args(s, first, {out, mean, invstd, new_mean, new_var});
}

// _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var,
// momentum, eps) -> (out, save_mean, save_invstd)
void batch_norm_no_training_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - op.schema().arguments().size();
  auto [out, mean, invstd, unused_mean, unused_var] = run_batch_norm(
      s[first].toTensor(), s[first + 1].toOptional<at::Tensor>(),
      s[first + 2].toOptional<at::Tensor>(), s[first + 3].toTensor(), s[first + 4].toTensor(),
      false, s[first + 5].toDouble(), s[first + 6].toDouble());
  replace_args(s, first, {out, empty_stat(mean), empty_stat(invstd)});
}

// _batch_norm_with_update(input, weight, bias, running_mean(a!), running_var(b!), momentum,
// eps) -> (out, save_mean, save_invstd, reserve), its _functional form (which returns the new
// statistics as two more results) and _batch_norm_no_update (batch statistics unless running
// ones are given, which it then uses without updating them).
void batch_norm_update_family_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::Stack& s = *stack;
  const std::string& name = op.schema().name();
  const size_t first = s.size() - op.schema().arguments().size();
  const at::Tensor input = s[first].toTensor();
  OptTensor running_mean = s[first + 3].toOptional<at::Tensor>();
  OptTensor running_var = s[first + 4].toOptional<at::Tensor>();
  const bool no_update = name == "aten::_batch_norm_no_update";
  const bool training = !no_update || !(defined(running_mean) && defined(running_var));
  auto [out, mean, invstd, new_mean, new_var] = run_batch_norm(
      input, s[first + 1].toOptional<at::Tensor>(), s[first + 2].toOptional<at::Tensor>(),
      running_mean, running_var, training, s[first + 5].toDouble(), s[first + 6].toDouble());
  if (no_update) {
    if (!training) {
      mean = empty_stat(mean);
      invstd = empty_stat(invstd);
    }
    replace_args(s, first, {out, mean, invstd, empty_reserve(input)});
  } else if (name == "aten::_batch_norm_with_update_functional") {
    replace_args(s, first, {out, mean, invstd, empty_reserve(input), new_mean, new_var});
  } else {
    running_mean->copy_(new_mean);
    running_var->copy_(new_var);
    replace_args(s, first, {out, mean, invstd, empty_reserve(input)});
  }
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
  for (const char* name : {"native_batch_norm", "_native_batch_norm_legit"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&native_batch_norm_kernel>());
  }
  m.impl("_native_batch_norm_legit.no_stats",
         torch::CppFunction::makeFromBoxedFunction<&batch_norm_no_stats_kernel>());
  m.impl("_native_batch_norm_legit_functional",
         torch::CppFunction::makeFromBoxedFunction<&batch_norm_functional_kernel>());
  m.impl("_native_batch_norm_legit_no_training",
         torch::CppFunction::makeFromBoxedFunction<&batch_norm_no_training_kernel>());
  for (const char* name :
       {"_batch_norm_with_update", "_batch_norm_with_update_functional", "_batch_norm_no_update"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&batch_norm_update_family_kernel>());
  }
}

}  // namespace
}  // namespace torchtpu::aten
