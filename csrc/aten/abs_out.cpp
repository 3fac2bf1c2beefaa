// torch.abs(z, out=t) for complex z. PyTorch's meta kernel for abs.out (the Python reference)
// wants `t` to have exactly z's real dtype, but the CPU kernel accepts any dtype the real
// result can be cast to (float64, float16, ...) and z's own complex dtype: it computes |z| and
// copies it into `t`.
// The tpu kernel does the same for those cases; every other call (real inputs, the exact
// real dtype) runs the lowered abs.out as before.
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/abs.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

// abs.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
void abs_out_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 2);
  const at::Tensor self = args[0].toTensor();
  at::Tensor out = args[1].toTensor();
  if (!self.is_complex() || !self.is_privateuseone() || !out.is_privateuseone() ||
      out.scalar_type() == c10::toRealValueType(self.scalar_type())) {
    return tpu_boxed_kernel(op, stack);
  }
  const c10::ScalarType real = c10::toRealValueType(self.scalar_type());
  // The CPU's checks and messages: a complex out= must have z's dtype (TensorIterator), a
  // real one any dtype the real result casts to (unary_op_impl_with_complex_to_float_out).
  if (out.is_complex()) {
    TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Found dtype ", out.scalar_type(),
                " but expected ", self.scalar_type());
  } else {
    TORCH_CHECK(c10::canCast(real, out.scalar_type()), "result type ", real,
                " can't be cast to the desired output type ", out.scalar_type());
  }
  at::Tensor r = at::abs(self);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  torch::jit::drop(*stack, 2);
  torch::jit::push(*stack, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("abs.out", torch::CppFunction::makeFromBoxedFunction<&abs_out_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten
