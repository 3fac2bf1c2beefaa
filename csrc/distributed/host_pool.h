// Reused host memory for staging collectives.
//
// Fresh host allocations of many megabytes pay a page fault per 4 KiB page on first touch (on this
// class of VM the faults cost more than the copy itself), and every staged collective needs host
// copies of its tensors. The pool hands out tensors over cached byte buffers; a buffer is free
// again once every tensor over it has died (its storage's only owner is the pool). Results take
// their host buffers over on XLA:CPU (tpu_backend.h), so a buffer may be in use for long.
#pragma once

#include <ATen/core/Tensor.h>

#include <mutex>
#include <vector>

namespace torchtpu::distributed {

class HostBufferPool {
 public:
  explicit HostBufferPool(int64_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}

  // An uninitialized contiguous CPU tensor.
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype);

 private:
  // Below this, a fresh allocation is cheap (malloc's own free lists) and not worth caching.
  static constexpr int64_t kMinPooledBytes = 64 * 1024;

  std::mutex mu_;
  std::vector<at::Tensor> buffers_;  // 1-D uint8
  int64_t cached_bytes_ = 0;
  int64_t max_cached_bytes_;
};

}  // namespace torchtpu::distributed
