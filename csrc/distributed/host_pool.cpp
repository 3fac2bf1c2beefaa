#include "distributed/host_pool.h"

#include <ATen/ATen.h>

namespace torchtpu::distributed {
namespace {

at::Tensor view_over(const at::Tensor& bytes, at::IntArrayRef sizes, at::ScalarType dtype) {
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype));
  t.set_(bytes.storage(), 0, sizes, c10::contiguous_strides(sizes));
  return t;
}

}  // namespace

at::Tensor HostBufferPool::empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t nbytes = c10::multiply_integers(sizes) * static_cast<int64_t>(c10::elementSize(dtype));
  if (nbytes < kMinPooledBytes) return at::empty(sizes, at::TensorOptions().dtype(dtype));
  std::lock_guard<std::mutex> lock(mu_);
  // Best fit among the free buffers, no more than twice the request (else the memory idles).
  at::Tensor* best = nullptr;
  for (auto& b : buffers_) {
    int64_t size = b.numel();
    if (b.storage().use_count() == 1 && size >= nbytes && size <= 2 * nbytes &&
        (best == nullptr || size < best->numel())) {
      best = &b;
    }
  }
  if (best != nullptr) return view_over(*best, sizes, dtype);
  // Make room by dropping free buffers, oldest first. Then forget in-use ones, oldest first:
  // results keep the buffers they took over (XLA:CPU), some for good (parameters, unsharded
  // weights), and a pool full of those would make every later collective allocate afresh. A
  // forgotten buffer lives on in its tensors and is freed with them.
  for (bool in_use : {false, true}) {
    for (auto it = buffers_.begin();
         it != buffers_.end() && cached_bytes_ + nbytes > max_cached_bytes_;) {
      if (in_use || it->storage().use_count() == 1) {
        cached_bytes_ -= it->numel();
        it = buffers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  at::Tensor bytes = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte));
  if (cached_bytes_ + nbytes <= max_cached_bytes_) {
    buffers_.push_back(bytes);
    cached_bytes_ += nbytes;
  }
  return view_over(bytes, sizes, dtype);
}

}  // namespace torchtpu::distributed
