// torch.autocast("tpu"): PyTorch's standard autocast policy (the op lists CUDA uses, from
// ATen/autocast_mode.h) registered for AutocastPrivateUse1. Matmuls and convolutions run in the
// lower precision, reductions and norms that need range in float32, mixed inputs promoted.
#include <ATen/autocast_mode.h>
#include <torch/library.h>
#include <torch/version.h>

namespace torchtpu::aten {
namespace {

using namespace at::autocast;
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
// torch 2.11's op lists below still name Dimname overloads unqualified; 2.13 dropped them (and
// at::DimnameList with named tensors).
using at::DimnameList;
#endif
using at::IntArrayRef;
using at::ScalarType;
using at::Tensor;
using c10::Scalar;

#define TORCHTPU_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TORCHTPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TORCHTPU_AUTOCAST_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TORCHTPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(TORCHTPU_AUTOCAST_LOWER)
  AT_FORALL_FP32(TORCHTPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHTPU_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TORCHTPU_AUTOCAST_PROMOTE)
}

}  // namespace
}  // namespace torchtpu::aten
