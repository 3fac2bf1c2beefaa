// out= overloads whose PyTorch meta registration cannot be called with their own schema's
// keywords (grid_sampler_3d_backward.out: "unexpected keyword argument 'out0'";
// _adaptive_avg_pool3d_backward.out: "got multiple values for keyword argument 'out'"), so the
// generic out= path, which asks the meta kernel to size the outputs, raised where the CPU
// succeeds. These kernels run the functional overload (lowered, natively) and write its results
// into the out tensors, resized like the CPU's resize_output; a result the functional form leaves
// undefined (output_mask off) leaves its out tensor untouched.
#include "aten/out_via_functional.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace torchtpu::aten {

void write_outs_via(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    const c10::OperatorHandle& functional, size_t n_written) {
  torch::jit::Stack& s = *stack;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t nouts = schema.returns().size();
  const size_t first = s.size() - nargs;
  std::vector<at::Tensor> outs;
  for (size_t i = first + nargs - nouts; i < s.size(); ++i) outs.push_back(s[i].toTensor());
  torch::jit::Stack call(s.begin() + static_cast<std::ptrdiff_t>(first),
                         s.begin() + static_cast<std::ptrdiff_t>(first + nargs - nouts));
  functional.callBoxed(&call);
  TORCH_INTERNAL_ASSERT(call.size() == nouts, "torchtpu: ", functional.schema().name(),
                        " returned ", call.size(), " values for ", nouts, " out tensors");
  for (size_t i = 0; i < std::min(n_written, nouts); ++i) {
    if (!call[i].isTensor() || !call[i].toTensor().defined()) continue;
    const at::Tensor& r = call[i].toTensor();
    at::native::resize_output(outs[i], r.sizes());
    outs[i].copy_(r);
  }
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
  for (at::Tensor& t : outs) s.emplace_back(std::move(t));
}

namespace {

// The functional overload of the same name ("" overload), every result written.
void out_via_functional(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  auto functional =
      c10::Dispatcher::singleton().findSchemaOrThrow(schema.name().c_str(), /*overload=*/"");
  write_outs_via(op, stack, functional, schema.returns().size());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("grid_sampler_3d_backward.out",
         torch::CppFunction::makeFromBoxedFunction<&out_via_functional>());
  m.impl("_adaptive_avg_pool3d_backward.out",
         torch::CppFunction::makeFromBoxedFunction<&out_via_functional>());
}

}  // namespace
}  // namespace torchtpu::aten
