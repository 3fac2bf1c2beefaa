#include "runtime/program_cache.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "config/config.h"

namespace torchtpu::runtime {

size_t program_cache_max_entries() {
  // A few thousand programs is ~0.5 GB of host memory at ~100 KB each; a steady workload uses
  // far fewer distinct signatures.
  static constexpr size_t kDefault = 4096;
  static const size_t max = [] {
    try {
      return static_cast<size_t>(
          config::positive_int("TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES", kDefault, int64_t{1} << 40));
    } catch (const std::invalid_argument& e) {
      TORCH_CHECK(false, "torchtpu: ", e.what(), " (the most programs kept in memory)");
      return kDefault;  // not reached: TORCH_CHECK(false) throws
    }
  }();
  return max;
}

namespace {
std::atomic<void (*)(const std::function<void()>&)> wait_hook{nullptr};
}  // namespace

void blocking_wait(const std::function<void()>& wait) {
  if (auto hook = wait_hook.load(std::memory_order_acquire)) return hook(wait);
  wait();
}

void set_blocking_wait_hook(void (*hook)(const std::function<void()>& wait)) {
  wait_hook.store(hook, std::memory_order_release);
}

}  // namespace torchtpu::runtime
