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

// Views whose geometry is all runtime values, for size-generic programs (exec/generic.h). A
// program iterates over `count` positions (a size bucket); `geometry` is a runtime s64 vector
// [n, iter_stride_0..iter_stride_{rank-1}, size_0..size_{rank-1}, views...], where position j
// has coordinates c_d = (j / iter_stride_d) % size_d (n = the positions that hold data, the
// rest are padding), and a view stored at `at` holds [offset, stride_0..stride_{rank-1}]: its
// element at position j is flat[offset + sum_d c_d * stride_d] (stride 0 along broadcast dims).
// Padding positions wrap into real coordinates, so reads stay inside the storage.
class GenericSpace {
 public:
  GenericSpace(shlo::FunctionBuilder& b, shlo::Value geometry, int64_t rank, int64_t count,
               shlo::ElementType index_type);
  // Where a view's [offset, strides...] start in `geometry` (the views follow the space's own
  // 1 + 2 * rank entries).
  int64_t view_at(int64_t view) const { return 1 + 2 * rank_ + view * (rank_ + 1); }
  // The view's elements at every position, [count], from its 1-D storage `flat`.
  shlo::Value read(shlo::Value flat, int64_t at);
  // `flat` with the view's elements at the positions that hold data replaced by `update`
  // ([count]); padding positions write nothing.
  shlo::Value write(shlo::Value flat, int64_t at, shlo::Value update);

 private:
  shlo::Value entry(int64_t i);              // geometry[i] broadcast over the positions
  shlo::Value flat_indices(int64_t at);      // offset + sum_d c_d * stride_d, [count]
  const std::vector<shlo::Value>& coords();  // c_d, computed once
  shlo::FunctionBuilder& b_;
  shlo::Value geometry_;
  int64_t rank_, count_;
  shlo::ElementType index_type_;
  std::vector<shlo::Value> coords_;
};

}  // namespace torchtpu::lowering
