#include "exec/numerics.h"

#include <ATen/Context.h>

namespace torchtpu::exec {

namespace {

// torch's legacy float32 matmul precision, which torch derives from the per-backend settings
// (torch.backends.{cuda,mkldnn}.matmul.fp32_precision) and refuses to name when they were set
// inconsistently: then the CUDA backend's says what an accelerator's matmuls may do.
at::Float32MatmulPrecision matmul_precision(const at::Context& ctx) {
  try {
    return ctx.float32MatmulPrecision();
  } catch (const c10::Error&) {
    return ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
                   at::Float32Precision::TF32
               ? at::Float32MatmulPrecision::HIGH
               : at::Float32MatmulPrecision::HIGHEST;
  }
}

}  // namespace

Numerics current_numerics() {
  const at::Context& ctx = at::globalContext();
  Numerics n;
  n.deterministic = ctx.deterministicAlgorithms();
  switch (matmul_precision(ctx)) {
    case at::Float32MatmulPrecision::HIGHEST:
      n.f32_dot = shlo::Precision::kHighest;
      break;
    case at::Float32MatmulPrecision::HIGH:
      n.f32_dot = shlo::Precision::kHigh;
      break;
    case at::Float32MatmulPrecision::MEDIUM:
      n.f32_dot = shlo::Precision::kDefault;
      break;
  }
  return n;
}

std::string describe(const Numerics& n) {
  return std::string("f32 dots ") + shlo::precision_name(n.f32_dot) +
         (n.deterministic ? ", deterministic" : "");
}

}  // namespace torchtpu::exec
