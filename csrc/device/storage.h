// A tpu storage's DataPtr owns a StorageHandle: a swappable, ref-counted PJRT buffer. The data
// pointer of the storage is the handle's address: unique and never dereferenced on the host.
#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "pjrt/pjrt.h"
#include "stablehlo/types.h"

namespace torchtpu::device {

using BufferPtr = std::shared_ptr<pjrt::Buffer>;

class StorageHandle {
 public:
  StorageHandle(int device_index, int64_t logical_bytes)
      : device_index_(device_index), logical_bytes_(logical_bytes) {}
  // Already holding `buffer`; no lock, since nobody else sees the handle yet (every eager op
  // makes one per returned tensor).
  StorageHandle(int device_index, BufferPtr buffer, std::vector<int64_t> dims,
                shlo::ElementType dtype, int64_t logical_bytes);
  ~StorageHandle();

  int device_index() const { return device_index_; }
  // Null while the storage was never written (empty() allocates nothing on the device).
  BufferPtr buffer() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  shlo::ElementType dtype() const { return dtype_; }
  // Every alias of the storage sees the new contents.
  void set_buffer(BufferPtr buffer, std::vector<int64_t> dims, shlo::ElementType dtype);
  // The storage's own byte count changed (resize_): memory stats count it from now on.
  void set_logical_bytes(int64_t bytes);
  // Snapshot of (buffer, dims, dtype) taken under the lock, for one program launch.
  void snapshot(BufferPtr* buffer, std::vector<int64_t>* dims, shlo::ElementType* dtype) const;

  // Fused eager (exec/fused_eager.h) defers ops: while a pending fused region holds this
  // storage's next contents (kWritten) or has read it (kRead), reading a kWritten buffer, or
  // replacing any such buffer, first runs the region (set_deferred_hook). One relaxed atomic
  // load per access otherwise.
  enum class Deferred : uint8_t { kNone, kRead, kWritten };
  Deferred deferred() const { return deferred_.load(std::memory_order_relaxed); }
  void set_deferred(Deferred d) { deferred_.store(d, std::memory_order_relaxed); }

 private:
  std::atomic<Deferred> deferred_{Deferred::kNone};
  mutable std::mutex mutex_;
  int device_index_;
  BufferPtr buffer_;
  std::vector<int64_t> dims_;
  shlo::ElementType dtype_ = shlo::ElementType::kU8;
  int64_t accounted_bytes_ = 0;
  // The storage's bytes (its nbytes), which a bucketed buffer (device/buckets.h) exceeds, and
  // what of them memory_allocated counts now (0 while there is no buffer);
  // accounted_bytes_ is what buffer_memory_allocated counts.
  int64_t logical_bytes_ = 0;
  int64_t accounted_logical_ = 0;
};

// Whether storages keep their device buffers 1-D. On platforms whose arrays are dense and
// row-major (XLA:CPU, XLA:GPU) a buffer's dims say nothing about its bytes, yet they are the
// type of every program argument that reads it: a [32, 64] matmul result viewed as [2, 16, 64]
// and a [2, 16, 64] result compiled two programs for the same read, and so did a [2] tensor
// unsqueezed to [2, 1] and a [2, 1] one. Flat buffers make a storage's type its element count
// and dtype alone, so equal views of equal storages share one program; reshaping a dense
// array is free there. TPU arrays are tiled (a reshape is a copy): they keep their shapes.
bool flat_buffers();
// The dims a storage's buffer holding a dense tensor of `sizes` has: {numel}, or
// {bucket_elements(numel)} with size buckets (device/buckets.h), or `sizes` (tiled platforms).
std::vector<int64_t> buffer_dims(c10::IntArrayRef sizes);
// Whether a buffer of `dims` holds `n` elements and nothing else: no padding past them.
bool exactly_holds(const std::vector<int64_t>& dims, int64_t n);

// Runs the pending fused region that holds `handle` (installed by exec/fused_eager.cpp);
// `write`: the caller is about to replace the buffer.
using DeferredHook = void (*)(const StorageHandle& handle, bool write);
void set_deferred_hook(DeferredHook hook);

StorageHandle* handle_of(const c10::Storage& storage);
inline StorageHandle* handle_of(const at::TensorBase& t) { return handle_of(t.storage()); }

c10::Allocator* allocator();
// A new storage of `nbytes` already holding `buffer`.
c10::Storage make_storage(size_t nbytes, int device_index, BufferPtr buffer,
                          std::vector<int64_t> dims, shlo::ElementType dtype);

// Bytes of the storages holding device buffers and their peak, per device, as
// torch.tpu.memory_allocated says.
int64_t memory_allocated(int device_index);
int64_t max_memory_allocated(int device_index);
// The same counting the device buffers' bytes: more by the padding of size buckets
// (device/buckets.h).
int64_t buffer_memory_allocated(int device_index);
int64_t max_buffer_memory_allocated(int device_index);
void reset_peak_memory(int device_index);

}  // namespace torchtpu::device
