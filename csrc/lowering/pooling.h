// Helpers the pooling lowerings share.
#pragma once

#include <cstddef>

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// grad_input[plane, indices[plane, j]] += grad_output[plane, j]: a scatter-add over
// (plane, flat index) coordinates of the `lead` leading dims of `in_type`, accumulated in f32
// for half types; the result has `in_type`. With `add` false the values are written instead
// (max_unpool).
Value scatter_planes(FunctionBuilder& b, Value grad, Value indices, const TensorType& in_type,
                     size_t lead, bool add = true);

}  // namespace torchtpu::lowering
