// Reading and writing strided views of a storage inside a program. A storage buffer has its
// own dims (usually those of the op that produced it); a tensor is (sizes, strides, offset)
// over the storage's elements in row-major order.
#pragma once

#include <cstdint>
#include <vector>

#include "stablehlo/builder.h"

namespace torchtpu::lowering {

struct StridedView {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);
int64_t numel_of(const std::vector<int64_t>& sizes);
// True when the view is exactly the whole buffer in its own row-major order.
bool covers_buffer(const StridedView& view, const std::vector<int64_t>& buffer_dims);

// The view's elements gathered from `base` (any dims), as a tensor of view.sizes.
shlo::Value read_view(shlo::FunctionBuilder& b, shlo::Value base, const StridedView& view);
// `base` with the view's elements replaced by `update` (shape view.sizes, base's dtype).
shlo::Value write_view(shlo::FunctionBuilder& b, shlo::Value base, const StridedView& view,
                       shlo::Value update);

}  // namespace torchtpu::lowering
