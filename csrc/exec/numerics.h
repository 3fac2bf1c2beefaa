// The process-wide numeric settings of torch that decide what a program computes, read when a
// call is scanned: torch.use_deterministic_algorithms (XLA's deterministic-ops compile option
// where the platform needs it, runtime/determinism.h) and torch.set_float32_matmul_precision
// (precision_config of every f32 dot_general and convolution). Both are structure: they are one
// byte of every signature key (eager ops, fused regions, compiled graphs), so changing one
// recompiles once and a program is never reused under the other setting.
#pragma once

#include <string>

#include "stablehlo/precision.h"

namespace torchtpu::exec {

struct Numerics {
  bool deterministic = false;  // torch.use_deterministic_algorithms(True), warn_only or not
  // float32 'highest' -> HIGHEST, 'high' -> HIGH, 'medium' -> DEFAULT (torch.backends.cuda.matmul
  // .allow_tf32 / fp32_precision = 'tf32' read as 'high', as torch itself maps them).
  shlo::Precision f32_dot = shlo::Precision::kHighest;

  char tag() const {
    return static_cast<char>('0' + (deterministic ? 1 : 0) + 2 * static_cast<int>(f32_dot));
  }
  bool operator==(const Numerics& o) const {
    return deterministic == o.deterministic && f32_dot == o.f32_dot;
  }
  bool operator!=(const Numerics& o) const { return !(*this == o); }
};

// torch's settings now (at::globalContext()).
Numerics current_numerics();

// "f32 dots HIGHEST, deterministic": the words of a signature's numerics, for miss explanations.
std::string describe(const Numerics& n);

}  // namespace torchtpu::exec
