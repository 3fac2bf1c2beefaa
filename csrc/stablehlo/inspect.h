// Facts read back from a printed module (this printer's generic form), for decisions the
// engine takes about a whole program after its lowerings ran.
#pragma once

#include <string>

namespace torchtpu::shlo {

// The stablehlo.scatter ops of `module` that add or multiply floating-point updates into their
// operand. XLA:GPU runs them with atomics, so duplicate indices accumulate in a run-dependent
// order (bitwise different sums) unless XLA's deterministic-ops option rewrites them.
int accumulating_float_scatters(const std::string& module);

// Whether a floating-point product of `module` (stablehlo.multiply, dot, dot_general,
// convolution) reaches an add, a subtract or an adding reduce with nothing that rounds in
// between (reshapes, broadcasts, transposes, slices, negations, selects, converts and other ops
// that move values whole). LLVM may fuse such a pair into one fused multiply-add when it
// optimizes and not when it does not (XLA:CPU at optimization level 0), which changes the
// sum's last bits: a module without one computes the same values at any level.
bool product_may_fuse_into_sum(const std::string& module);

}  // namespace torchtpu::shlo
