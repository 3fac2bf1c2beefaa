// Complex power with the CPU's values at zeros, infinities and NaNs (complex_pow.cpp).
#pragma once

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// x ** y for complex x and y of one dtype, as glibc's cpow computes it.
Value complex_pow(FunctionBuilder& b, Value x, Value y);

}  // namespace torchtpu::lowering
