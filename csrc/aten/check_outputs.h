// How eager programs and compiled graphs carry device-side checks: the lowerings' checks
// become one extra (last) program output, and its buffer goes to the runtime after launch.
#pragma once

#include <memory>
#include <vector>

#include "lowering/checks.h"
#include "runtime/device_checks.h"

namespace torchtpu::aten {

// Appends the packed checks to `outputs` and returns what the runtime needs to word their
// errors; null (and nothing appended) when there are none.
inline runtime::CheckSpecs append_check_output(shlo::FunctionBuilder& b,
                                               const std::vector<lowering::DeviceCheck>& checks,
                                               std::vector<shlo::Value>& outputs) {
  if (checks.empty()) return nullptr;
  outputs.push_back(lowering::pack_checks(b, checks));
  auto specs = std::make_shared<std::vector<runtime::CheckSpec>>();
  for (const lowering::DeviceCheck& c : checks) {
    specs->push_back(
        {c.op, c.message,
         c.index_error ? runtime::CheckError::kIndexError : runtime::CheckError::kRuntimeError});
  }
  return specs;
}

}  // namespace torchtpu::aten
