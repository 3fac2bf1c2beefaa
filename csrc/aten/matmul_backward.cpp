// aten::matmul_backward(grad, self, other, mask) for dense tpu tensors: the gradients of
// torch.matmul, which is what the op means (PyTorch implements it for nested tensors only; a
// dense call on the CPU raises NotImplementedError, on tpu it ran into the CPU fallback and
// failed there). Built from lowered tpu ops: matmul against the other operand transposed, then
// summed over broadcast batch dims; 1-D operands are treated as matmul treats them (a row or a
// column that the result drops).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <tuple>

namespace torchtpu::aten {
namespace {

std::tuple<at::Tensor, at::Tensor> matmul_backward(const at::Tensor& grad, const at::Tensor& self,
                                                   const at::Tensor& other,
                                                   std::array<bool, 2> mask) {
  TORCH_CHECK(self.dim() >= 1 && other.dim() >= 1,
              "matmul_backward: both arguments need at least 1 dimension, got ", self.dim(),
              "D and ", other.dim(), "D");
  if (!grad.defined()) return {at::Tensor(), at::Tensor()};
  at::Tensor a = self.dim() == 1 ? self.unsqueeze(0) : self;      // (1, k)
  at::Tensor b = other.dim() == 1 ? other.unsqueeze(-1) : other;  // (k, 1)
  // The product of a and b has the dims matmul dropped for 1-D operands: put them back.
  at::Tensor g = grad;
  if (self.dim() == 1) g = g.unsqueeze(other.dim() == 1 ? 0 : g.dim() - 1);
  if (other.dim() == 1) g = g.unsqueeze(-1);
  at::Tensor grad_self, grad_other;
  if (mask[0]) grad_self = at::matmul(g, b.mT()).sum_to_size(a.sizes()).reshape(self.sizes());
  if (mask[1]) grad_other = at::matmul(a.mT(), g).sum_to_size(b.sizes()).reshape(other.sizes());
  return {grad_self, grad_other};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("matmul_backward", matmul_backward); }

}  // namespace
}  // namespace torchtpu::aten
