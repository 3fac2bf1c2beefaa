// A dense f32 constant built from host values (interpolation weights, resampling matrices).
#pragma once

#include <cstdint>
#include <vector>

#include "stablehlo/builder.h"

namespace torchtpu::lowering {

// A dense f32 constant of `shape` from row-major `v` (printed flat, then reshaped).
shlo::Value dense_f32(shlo::FunctionBuilder& b, const std::vector<float>& v,
                      const std::vector<int64_t>& shape);

}  // namespace torchtpu::lowering
