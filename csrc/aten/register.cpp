// Every aten op without an explicit tpu kernel reaches this boxed fallback, which lowers it
// natively or runs it through the counted CPU fallback.
#include <torch/library.h>

#include <mutex>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten

namespace torchtpu::aten {

// The fallback only sees ops that have no kernel for PrivateUse1. Structured ops do have one
// (CompositeExplicitAutogradNonFunctional: meta + empty + out=), which costs a TensorIterator
// per call; lowered ops and their in-place/out= variants get our kernel directly instead.
void register_lowered_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                          c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      // Composite-implicit ops decompose above the backend, and that is how they get their
      // gradients: a backend kernel would cut autograd off (true_divide lost its gradient).
      // Backward ops are the exception: autograd calls them but does not differentiate them
      // (double backward aside), and their lowerings keep half-precision math in float32.
      bool is_backward =
          name.name.size() > 9 && name.name.compare(name.name.size() - 9, 9, "_backward") == 0;
      if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
          !is_backward) {
        continue;
      }
      if (!exec::plan_for(*op).lowering) continue;
      std::string n = name.name.substr(6);
      if (!name.overload_name.empty()) n += "." + name.overload_name;
      lib->impl(n.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
    }
  });
}

}  // namespace torchtpu::aten
