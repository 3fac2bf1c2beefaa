// Page-locked-style host memory for `tensor.pin_memory()` / DataLoader(pin_memory=True) under
// device "tpu". PJRT takes host pointers directly (uploads copy out of them during the call, so
// a non_blocking copy from a pinned tensor is complete when `.to()` returns and the host buffer
// may be reused at once). The allocator hands out page-aligned blocks and remembers them, so
// `is_pinned()` answers true for any pointer inside a live block, like CUDA's host allocator.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace torchtpu::device {
namespace {

constexpr size_t kAlign = 4096;

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;  // start -> size
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

void free_pinned(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> g(registry().mutex);
    registry().blocks.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n > 0) {
      size_t rounded = (n + kAlign - 1) / kAlign * kAlign;
      p = std::aligned_alloc(kAlign, rounded);
      TORCH_CHECK_WITH(OutOfMemoryError, p, "torchtpu: cannot allocate ", n,
                       " bytes of pinned host memory");
      std::lock_guard<std::mutex> g(registry().mutex);
      registry().blocks[reinterpret_cast<uintptr_t>(p)] = n;
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static PinnedAllocator* a = new PinnedAllocator();
  return a;
}

bool is_pinned_ptr(const void* data) {
  auto p = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> g(registry().mutex);
  auto& blocks = registry().blocks;
  auto it = blocks.upper_bound(p);
  if (it == blocks.begin()) return false;
  --it;
  return p >= it->first && p < it->first + std::max<size_t>(it->second, 1);
}

}  // namespace torchtpu::device
