#include "runtime/compile.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "config/config.h"
#include "runtime/disk_cache.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace torchtpu::runtime {
namespace {

bool dump_mlir() {
  static const bool on = config::flag("TORCHTPU_DUMP_MLIR", false);
  return on;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

DiskCache& disk_cache() {
  static DiskCache cache = DiskCache::from_environment();
  return cache;
}

const std::string& fingerprint(Runtime& rt) {
  static const std::string f = platform_fingerprint(rt.client());
  return f;
}

// Set once this process has reloaded one of its own serialized executables: from then on a
// reload failure means a bad entry, not a platform that cannot reload at all.
std::atomic<bool> reload_verified{false};

void refuse_reload(Runtime& rt, const std::string& why) {
  disk_cache().disable();
  static std::once_flag logged;
  std::call_once(logged, [&] {
    std::fprintf(stderr,
                 "torchtpu: this PJRT platform cannot reload serialized executables (%s: %s); the "
                 "disk cache is disabled for this process\n",
                 rt.platform().c_str(), why.c_str());
  });
}

// Serializes a freshly compiled executable into the disk cache. The first time in a process it
// also reloads the bytes, so a platform that cannot reload is found before any entry is written.
void store_in_disk_cache(Runtime& rt, const std::string& key, const pjrt::Executable& exe) {
  std::string bytes;
  try {
    bytes = exe.serialize();
    if (!reload_verified.load()) {
      rt.client().deserialize(bytes);
      reload_verified.store(true);
    }
  } catch (const pjrt::Error& e) {
    metrics().disk_cache_load_failures++;
    refuse_reload(rt, e.what());
    return;
  }
  DiskCache::StoreResult r = disk_cache().store(key, bytes);
  if (r.written) metrics().disk_cache_writes++;
  metrics().disk_cache_evictions += r.evicted;
  if (!r.written && !r.error.empty()) {
    // Reading may still work (a shared read-only cache), so only say it once and go on.
    static std::once_flag logged;
    std::call_once(logged, [&] {
      std::fprintf(stderr, "torchtpu: not writing the compilation cache: %s\n", r.error.c_str());
    });
  }
}

// The torch index of a device, for the profiler's tpu track.
int index_of(const pjrt::Device& device) {
  Runtime& rt = get();
  for (int i = 0; i < rt.device_count(); ++i) {
    if (&rt.device(i) == &device) return i;
  }
  return -1;
}

}  // namespace

bool log_compiles() {
  static const bool on = config::flag("TORCHTPU_LOG_COMPILES", false);
  return on;
}

std::string disk_cache_dir() {
  DiskCache& c = disk_cache();
  return c.enabled() ? c.dir() : std::string();
}

pjrt::ExecuteResult Program::execute(const std::vector<PJRT_Buffer*>& args,
                                     const pjrt::Device& device) const {
  return execute(args.data(), args.size(), device);
}

pjrt::ExecuteResult Program::execute(PJRT_Buffer* const* args, size_t num_args,
                                     const pjrt::Device& device) const {
  const int64_t traced_start = trace::enabled() ? trace::now_ns() : 0;
  try {
    pjrt::ExecuteResult r = exe_->execute(args, num_args, &device);
    if (traced_start) {
      trace::execution_launched(signature_, index_of(device), traced_start, r.done.get());
    }
    return r;
  } catch (const pjrt::Error& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, !e.is_out_of_memory(), "torchtpu: out of device memory ",
                     "running ", signature_, ": ", e.what());
    TORCH_CHECK(false, "torchtpu: launching ", signature_, " failed: ", e.what());
  }
}

std::shared_ptr<Program> compile_program(const std::string& mlir, const std::string& signature,
                                         const std::string& why) {
  Runtime& rt = get();
  trace::Scope traced(trace::Kind::kCompile, "tpu::compile", -1, 0, signature);
  // Memory miss -> disk -> compile. The key covers everything that decides the executable.
  std::string key;
  if (disk_cache().enabled()) {
    auto start = std::chrono::steady_clock::now();
    key = cache_key(fingerprint(rt), rt.compile_options(), mlir);
    std::string payload;
    DiskCache::Load loaded = disk_cache().load(key, &payload);
    if (loaded == DiskCache::Load::kHit) {
      try {
        auto exe = rt.client().deserialize(payload);
        metrics().disk_cache_hits++;
        traced.set_detail(signature + " [disk cache hit]");
        if (log_compiles()) {
          std::fprintf(stderr, "torchtpu: loaded %s from the disk cache in %.1f ms (%s)\n",
                       signature.c_str(), ms_since(start), why.c_str());
        }
        return std::make_shared<Program>(std::move(exe), signature);
      } catch (const pjrt::Error& e) {
        // An intact entry that does not load. Either the platform cannot reload executables
        // at all (the store below probes that, once per process, and disables the cache), or
        // the entry came from another build of the same plugin version (it is overwritten).
        metrics().disk_cache_load_failures++;
        if (log_compiles()) {
          std::fprintf(stderr,
                       "torchtpu: the disk cache entry of %s did not load (%s); compiling it\n",
                       signature.c_str(), e.what());
        }
      }
    } else if (loaded == DiskCache::Load::kCorrupt) {
      metrics().disk_cache_corrupt++;
      if (log_compiles()) {
        std::fprintf(stderr, "torchtpu: removed a corrupt disk cache entry for %s\n",
                     signature.c_str());
      }
    }
    metrics().disk_cache_misses++;
  }

  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<pjrt::Executable> exe;
  try {
    exe = rt.client().compile(mlir, rt.compile_options());
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(
        false, "torchtpu: XLA failed to compile ", signature, ": ", e.what(),
        dump_mlir() ? "\n" + mlir : std::string("\n(TORCHTPU_DUMP_MLIR=1 shows the module)"));
  }
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  metrics().programs_compiled++;
  metrics().compile_ns += ns;
  if (log_compiles()) {
    std::fprintf(stderr, "torchtpu: compiled %s in %.1f ms (%s)\n", signature.c_str(), ns / 1e6,
                 why.c_str());
  }
  if (dump_mlir()) std::fprintf(stderr, "%s\n", mlir.c_str());
  if (!key.empty() && disk_cache().enabled()) store_in_disk_cache(rt, key, *exe);
  traced.set_detail(signature + (key.empty() ? " [compiled]" : " [disk cache miss: compiled]"));
  return std::make_shared<Program>(std::move(exe), signature);
}

}  // namespace torchtpu::runtime
