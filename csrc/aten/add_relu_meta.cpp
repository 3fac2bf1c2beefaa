// Meta kernels for the _add_relu forms PyTorch ships none for (the Scalar overload and the
// Tensor out= form), so the eager executor can infer their results and run the lowering
// (lowering/add_relu.cpp) instead of the CPU fallback: the result is add's.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

at::Tensor add_relu_scalar_meta(const at::Tensor& self, const at::Scalar& other,
                                const at::Scalar& alpha) {
  return at::add(self, other, alpha);
}

at::Tensor& add_relu_out_meta(const at::Tensor& self, const at::Tensor& other,
                              const at::Scalar& alpha, at::Tensor& out) {
  at::Tensor r = at::add(self, other, alpha);
  at::native::resize_output(out, r.sizes());
  return out;
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_add_relu.Scalar", add_relu_scalar_meta);
  m.impl("_add_relu.out", add_relu_out_meta);
}

}  // namespace
}  // namespace torchtpu::aten
