// rrelu_with_noise writes the noise it drew into its `noise` argument in place: the tpu kernel
// runs the functional form (lowered in lowering/rrelu.cpp) and copies the noise back.
#include <ATen/ops/rrelu_with_noise.h>
#include <torch/library.h>

#include <optional>

namespace torchtpu::aten {
namespace {

at::Tensor rrelu_with_noise_tpu(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                const at::Scalar& upper, bool training,
                                std::optional<at::Generator> generator) {
  auto [out, noise_out] =
      at::rrelu_with_noise_functional(self, noise, lower, upper, training, generator);
  if (training) noise.copy_(noise_out);
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("rrelu_with_noise", rrelu_with_noise_tpu); }

}  // namespace
}  // namespace torchtpu::aten
