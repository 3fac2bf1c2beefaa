// Layout arithmetic on plain dims, free of torch and of every torchtpu layer, so that lowering/
// (which sees only lowering/, stablehlo/, config/ and util/) and runtime/ share one definition.
#pragma once

#include <cstdint>
#include <vector>

namespace torchtpu::util {

// Whether `strides` are the row-major strides of `sizes`; a size-1 dim's stride never matters.
inline bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

}  // namespace torchtpu::util
