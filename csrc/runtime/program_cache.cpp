#include "runtime/program_cache.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>

namespace torchtpu::runtime {

size_t program_cache_max_entries() {
  // A few thousand programs is ~0.5 GB of host memory at ~100 KB each; a steady workload uses
  // far fewer distinct signatures.
  static constexpr size_t kDefault = 4096;
  static const size_t max = [] {
    const char* v = std::getenv("TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES");
    if (!v || !*v) return kDefault;
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(v, &end, 10);
    TORCH_CHECK(errno == 0 && end && *end == '\0' && n > 0,
                "torchtpu: TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES=", v,
                " is not a positive integer (the most programs kept in memory; default ", kDefault,
                ")");
    return static_cast<size_t>(n);
  }();
  return max;
}

}  // namespace torchtpu::runtime
