// Page-locked-style host memory for `tensor.pin_memory()` / DataLoader(pin_memory=True) under
// device "tpu". PJRT takes host pointers directly (uploads copy out of them during the call, so
// a non_blocking copy from a pinned tensor is complete when `.to()` returns and the host buffer
// may be reused at once). The allocator hands out page-aligned blocks and remembers them, so
// `is_pinned()` answers true for any pointer inside a live block, like CUDA's host allocator.
// It is also the device type's at::HostAllocator, which torch.accelerator.empty_host_cache()
// (vLLM calls it at every shutdown) dereferences once the device is initialized.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace torchtpu::device {
bool is_pinned_ptr(const void* data);

namespace {

constexpr size_t kAlign = 4096;

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;  // start -> size
  // Guarded by mutex. With no cache, every allocated block is active, so these two stand for
  // HostStats' active and allocated counters alike (get_stats copies them into both).
  c10::CachingAllocator::Stat blocks_stat, bytes_stat;
  int64_t num_host_alloc = 0, num_host_free = 0;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

void free_pinned(void* p) {
  if (!p) return;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mutex);
    auto it = r.blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it != r.blocks.end()) {
      r.blocks_stat.decrease(1);
      r.bytes_stat.decrease(it->second);
      r.num_host_free++;
      r.blocks.erase(it);
    }
  }
  std::free(p);
}

struct PinnedAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n > 0) {
      size_t rounded = (n + kAlign - 1) / kAlign * kAlign;
      p = std::aligned_alloc(kAlign, rounded);
      TORCH_CHECK_WITH(OutOfMemoryError, p, "torchtpu: cannot allocate ", n,
                       " bytes of pinned host memory");
      Registry& r = registry();
      std::lock_guard<std::mutex> g(r.mutex);
      r.blocks[reinterpret_cast<uintptr_t>(p)] = n;
      r.blocks_stat.increase(1);
      r.bytes_stat.increase(n);
      r.num_host_alloc++;
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // Uploads copy out of the host block during the PJRT call, so no stream ever holds one: there
  // is no use to wait for. True when the pointer is one of ours, as CUDA's allocator answers.
  bool record_event(void* ptr, void*, c10::Stream) override { return is_pinned_ptr(ptr); }
  // No cache: a block goes back to the system when its last tensor dies.
  void empty_cache() override {}
  at::HostStats get_stats() override {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mutex);
    at::HostStats stats;
    stats.active_requests = stats.allocations = r.blocks_stat;
    stats.active_bytes = stats.allocated_bytes = r.bytes_stat;
    stats.num_host_alloc = r.num_host_alloc;
    stats.num_host_free = r.num_host_free;
    return stats;
  }
  void reset_accumulated_stats() override {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mutex);
    r.blocks_stat.reset_accumulated();
    r.bytes_stat.reset_accumulated();
    r.num_host_alloc = 0;
    r.num_host_free = 0;
  }
  void reset_peak_stats() override {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mutex);
    r.blocks_stat.reset_peak();
    r.bytes_stat.reset_peak();
  }
};

}  // namespace

at::HostAllocator* pinned_allocator() {
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
