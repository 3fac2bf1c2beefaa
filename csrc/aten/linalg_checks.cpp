// Host-side error checks the CPU linalg kernels make and a program cannot (it cannot raise).
#include <ATen/ops/_linalg_check_errors.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

// _linalg_solve_ex(A, B, left, check_errors): with check_errors (torch.linalg.solve_ex(...,
// check_errors=True)) the CPU raises on a nonzero info. A program cannot raise, so the lowered op
// runs without it and the host checks its info afterwards, as the CPU kernel does (one sync,
// only when asked).
void linalg_solve_ex_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t first = stack->size() - op.schema().arguments().size();
  c10::IValue& check = (*stack)[first + 3];
  if (!check.toBool()) return tpu_boxed_kernel(op, stack);
  bool single = (*stack)[first].toTensor().dim() == 2;
  check = c10::IValue(false);
  tpu_boxed_kernel(op, stack);
  at::_linalg_check_errors(stack->back().toTensor(), "torch.linalg.solve_ex", single);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_solve_ex", torch::CppFunction::makeFromBoxedFunction<&linalg_solve_ex_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten
