// Index lists reach the tpu kernels through this shim, which (like CUDA) accepts index tensors
// that live on the CPU by moving them to the device, and expands boolean masks of index.Tensor
// into their nonzero coordinates: the result's shape depends on the mask's values, so only
// nonzero itself has to see them.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

void index_list_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  torch::jit::Stack& s = *stack;
  const size_t first = s.size() - schema.arguments().size();
  const size_t li = first + *schema.argumentIndexWithName("indices");
  const at::Tensor& self = s[first].toTensor();
  bool expand_masks = schema.returns().size() == 1 && !schema.arguments()[0].alias_info() &&
                      schema.name().find("index_put") == std::string::npos;
  c10::List<std::optional<at::Tensor>> indices = s[li].toOptionalTensorList();
  c10::List<std::optional<at::Tensor>> fixed;
  bool changed = false;
  int64_t self_dim = 0;  // the dim of self the i-th index starts at
  for (size_t i = 0; i < indices.size(); ++i) {
    std::optional<at::Tensor> t = indices.get(i);
    if (t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte)) {
      // A mask's shape is known on the host: checked here as the CPU does, before its nonzero
      // coordinates (which would be silently clamped) exist.
      for (int64_t j = 0; j < t->dim(); ++j) {
        int64_t d = self_dim + j;
        TORCH_CHECK_INDEX(d < self.dim() && t->size(j) == self.size(d), "The shape of the mask ",
                          t->sizes(), " at index ", j,
                          " does not match the shape of the indexed tensor ", self.sizes(),
                          " at index ", d);
      }
      self_dim += t->dim();
    } else {
      self_dim += 1;
    }
    if (t && t->defined() && t->device() != self.device() && t->dim() > 0) {
      t = t->to(self.device());
      changed = true;
    }
    bool mask =
        t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
    if (expand_masks && mask && t->dim() > 0) {
      at::Tensor nz = at::nonzero(*t);
      for (int64_t j = 0; j < t->dim(); ++j) fixed.push_back(nz.select(1, j));
      changed = true;
    } else {
      fixed.push_back(t);
    }
  }
  if (changed) s[li] = c10::IValue(fixed);
  tpu_boxed_kernel(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"index.Tensor", "_unsafe_index.Tensor", "index_put", "index_put_",
                           "_unsafe_index_put", "_index_put_impl_"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&index_list_kernel>());
  }
}

}  // namespace
}  // namespace torchtpu::aten
