// Every aten op without an explicit tpu kernel reaches this boxed fallback, which lowers it
// natively or runs it through the counted CPU fallback.
#include <torch/library.h>

#include "aten/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten
