// bernoulli.out / .Tensor_out / .float_out fill `out` in its own dtype, as the CPU kernels do
// (bernoulli_ on out): PyTorch's meta kernel for them refuses a bool out ("unsafe cast from
// float32"), which the CPU accepts, so they do not go through the lowered out= path.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen,
                          at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  return out.bernoulli_(self, std::move(gen));
}

at::Tensor& bernoulli_tensor_out(const at::Tensor& self, const at::Tensor& p,
                                 std::optional<at::Generator> gen, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  return out.bernoulli_(p, std::move(gen));
}

at::Tensor& bernoulli_float_out(const at::Tensor& self, double p, std::optional<at::Generator> gen,
                                at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  return out.bernoulli_(p, std::move(gen));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("bernoulli.out", bernoulli_out);
  m.impl("bernoulli.Tensor_out", bernoulli_tensor_out);
  m.impl("bernoulli.float_out", bernoulli_float_out);
}

}  // namespace
}  // namespace torchtpu::aten
