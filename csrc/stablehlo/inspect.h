// Facts read back from a printed module (this printer's generic form), for decisions the
// engine takes about a whole program after its lowerings ran.
#pragma once

#include <string>

namespace torchtpu::shlo {

// The stablehlo.scatter ops of `module` that add or multiply floating-point updates into their
// operand. XLA:GPU runs them with atomics, so duplicate indices accumulate in a run-dependent
// order (bitwise different sums) unless XLA's deterministic-ops option rewrites them.
int accumulating_float_scatters(const std::string& module);

}  // namespace torchtpu::shlo
