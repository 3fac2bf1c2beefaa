// A user's StableHLO module, parsed once per text (lowering/stablehlo_call.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "stablehlo/types.h"
#include "stablehlo/user_module.h"

namespace torchtpu::lowering {

// Throws a ValueError-kind c10::Error naming what the module's text does not allow.
std::shared_ptr<const shlo::UserModule> user_module(const std::string& text);
// "(tensor<4xf32>, tensor<f32>)"
std::string describe_types(const std::vector<shlo::TensorType>& types);

}  // namespace torchtpu::lowering
