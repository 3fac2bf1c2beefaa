// Reading and writing strided views of a storage inside a program. A storage buffer has its
// own dims (usually those of the op that produced it); a tensor is (sizes, strides, offset)
// over the storage's elements in row-major order.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "stablehlo/builder.h"

namespace torchtpu::lowering {

struct StridedView {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  // When set, the offset is this 0-d integer value at run time (`offset` is then only the
  // first call's sample and is never read), so a view that moves through its storage (a row
  // loop, a KV-cache position, a sliding window) reuses one program. PyTorch keeps every view
  // inside its storage, which is what lets dynamic slices (XLA clamps their starts) serve it.
  std::optional<shlo::Value> offset_value;
};

int64_t numel_of(const std::vector<int64_t>& sizes);
// True when the view is exactly the whole buffer in its own row-major order (never for a view
// with a runtime offset).
bool covers_buffer(const StridedView& view, const std::vector<int64_t>& buffer_dims);

// The storage's bytes reinterpreted as `want` elements (a storage written through one dtype
// and read through another, e.g. after an untyped-storage copy). Returns `base` unchanged when
// the dtypes match, else a flat 1-D value.
shlo::Value reinterpret(shlo::FunctionBuilder& b, shlo::Value base, shlo::ElementType want);

// The view's elements gathered from `base` (any dims), as a tensor of view.sizes.
shlo::Value read_view(shlo::FunctionBuilder& b, shlo::Value base, const StridedView& view);
// `base` with the view's elements replaced by `update` (shape view.sizes, base's dtype).
shlo::Value write_view(shlo::FunctionBuilder& b, shlo::Value base, const StridedView& view,
                       shlo::Value update);

// Whether a write of `update_dtype` values into `view` replaces every byte of a storage of
// `dims`/`dtype` (then the storage's current contents are not needed).
bool covers_storage(const std::vector<int64_t>& dims, shlo::ElementType dtype,
                    const StridedView& view, shlo::ElementType update_dtype);
// New contents of a storage after `update` (the view's dtype) lands in `view`. `base` is the
// current buffer (dims and dtype as stored), or nullopt for a never-written storage of
// `dims`/`dtype`. A write covering every byte stores `update` as is (its shape and dtype).
shlo::Value write_storage(shlo::FunctionBuilder& b, std::optional<shlo::Value> base,
                          const std::vector<int64_t>& dims, shlo::ElementType dtype,
                          const StridedView& view, shlo::Value update);

}  // namespace torchtpu::lowering
