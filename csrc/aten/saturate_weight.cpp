// aten::_saturate_weight_to_fp16: the CPU's kernel (CompositeImplicitAutograd, fbgemm's
// HandleWeightsSaturation) clamps the first size(0) * size(1) floats of weight.contiguous() to
// the float16 range through a raw host pointer and returns `weight`. On tpu that pointer is no
// host memory: the op returned its input unsaturated, without an error. This kernel does the
// same thing with tensor ops, in place on contiguous weights as on the CPU.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

at::Tensor saturate_weight_to_fp16(const at::Tensor& weight) {
  // As on the CPU: size(1) of a 0-d or 1-d weight raises its IndexError.
  const int64_t n = weight.size(0) * weight.size(1);
  TORCH_CHECK(weight.scalar_type() == at::kFloat, "expected scalar type Float but found ",
              weight.scalar_type());
  // The CPU saturates weight.contiguous(): a copy for a non-contiguous weight, which it drops.
  if (!weight.is_contiguous() || n == 0) return weight;
  constexpr double kFp16Max = 65504.0;
  at::Tensor head = weight.view({-1}).narrow(0, 0, n);
  // NaN compares false both ways and stays, like CheckAndSaturate's comparisons.
  if (head.abs().gt(kFp16Max).any().item<bool>()) {
    TORCH_WARN("FOUND weight out of range ");
    head.clamp_(-kFp16Max, kFp16Max);
  }
  return weight;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_saturate_weight_to_fp16", &saturate_weight_to_fp16);
}

}  // namespace
}  // namespace torchtpu::aten
