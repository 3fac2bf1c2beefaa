// Backward ops whose output_mask leaves gradients out return None for them, which the eager
// kernel cannot type yet (it types every output from the meta kernel): these tpu kernels ask the
// lowering for every output and drop the unrequested ones.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

// Runs `op` with every output_mask entry set, then blanks the outputs nobody asked for.
// `fixup` may fill optional arguments the meta kernel needs to produce every output.
template <void (*fixup)(torch::jit::Stack&, size_t)>
void all_outputs_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - schema.arguments().size();
  const size_t mi = first + *schema.argumentIndexWithName("output_mask");
  std::vector<bool> want;
  for (bool m : s[mi].toBoolList()) want.push_back(m);
  c10::List<bool> all;
  for (size_t i = 0; i < want.size(); ++i) all.push_back(true);
  s[mi] = c10::IValue(all);
  fixup(s, first);
  tpu_boxed_kernel(op, stack);
  const size_t ret = s.size() - schema.returns().size();
  for (size_t i = 0; i < want.size(); ++i) {
    if (!want[i]) s[ret + i] = c10::IValue(at::Tensor());
  }
}

void no_fixup(torch::jit::Stack&, size_t) {}

// native_layer_norm_backward has no weight/bias gradient without weight/bias: give it ones
// (which leaves grad_input unchanged) for both.
void layer_norm_fixup(torch::jit::Stack& s, size_t first) {
  std::optional<at::Tensor> w = s[first + 5].toOptional<at::Tensor>();
  std::optional<at::Tensor> bias = s[first + 6].toOptional<at::Tensor>();
  if (w && w->defined() && bias && bias->defined()) return;
  at::Tensor input = s[first + 1].toTensor();
  std::vector<int64_t> shape = s[first + 2].toIntVector();
  at::Tensor ones = at::ones(shape, input.options());
  if (!w || !w->defined()) s[first + 5] = ones;
  if (!bias || !bias->defined()) s[first + 6] = ones;
}

// convolution_backward: without a bias, autograd passes no (or empty) bias_sizes, from which the
// meta kernel sizes grad_bias; with one they are [out_channels], which this fills in either way.
void convolution_fixup(torch::jit::Stack& s, size_t first) {
  const at::Tensor& w = s[first + 2].toTensor();
  bool transposed = s[first + 7].toBool();
  int64_t out_channels = transposed ? w.size(1) * s[first + 9].toInt() : w.size(0);
  s[first + 3] = c10::IValue(std::vector<int64_t>{out_channels});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&convolution_fixup>>());
  m.impl("grid_sampler_2d_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&no_fixup>>());
  m.impl("grid_sampler_3d_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&no_fixup>>());
  m.impl("native_batch_norm_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&no_fixup>>());
  m.impl("batch_norm_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&no_fixup>>());
  m.impl("native_group_norm_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&no_fixup>>());
  m.impl("native_layer_norm_backward",
         torch::CppFunction::makeFromBoxedFunction<&all_outputs_kernel<&layer_norm_fixup>>());
}

}  // namespace
}  // namespace torchtpu::aten
