// Process-wide counters: every compile, cache hit, execution, transfer, sync and CPU fallback
// is counted so users can see when and why work happens.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torchtpu::runtime {

struct Metrics {
  std::atomic<int64_t> programs_compiled{0};
  std::atomic<int64_t> compile_ns{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> cache_misses{0};
  // Programs dropped from the bounded in-memory caches (TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES).
  std::atomic<int64_t> program_cache_evictions{0};
  // Misses of an op or graph that already had a compiled signature (runtime/signature.h says
  // which cached signature was nearest and what differs: torchtpu.recompile_reasons()).
  std::atomic<int64_t> recompiles{0};
  // Modules built by lowering (exec::build), eager ops and graphs alike: a warm restart that
  // reaches its executables through recipes lowers none.
  std::atomic<int64_t> modules_lowered{0};
  // Compiled graphs' specializations dropped from their bounded caches (a dynamic graph's
  // per-size programs, torchtpu.compile_step's per-signature traces).
  std::atomic<int64_t> graph_cache_evictions{0};
  // Memory misses whose module was identical to one already held (compile.h): not compiled.
  std::atomic<int64_t> programs_shared{0};
  // Hot light programs compiled again at full effort in the background (compile.h).
  std::atomic<int64_t> programs_upgraded{0};
  std::atomic<int64_t> disk_cache_hits{0};
  std::atomic<int64_t> disk_cache_misses{0};
  // Of the hits, those reached from a typed signature (no lowering or printing: compile.h).
  std::atomic<int64_t> disk_cache_signature_hits{0};
  // Entries found truncated, garbled, of another format version or for another key (removed).
  std::atomic<int64_t> disk_cache_corrupt{0};
  std::atomic<int64_t> disk_cache_writes{0};  // executables
  // Recipes written (compile.h): small entries beside the executables, under the same bound.
  std::atomic<int64_t> disk_cache_signature_writes{0};
  std::atomic<int64_t> disk_cache_evictions{0};
  // Serialized executables the platform would not reload (or serialize).
  std::atomic<int64_t> disk_cache_load_failures{0};
  std::atomic<int64_t> executions{0};
  // Launches that waited in a device's launch queue (runtime/launch_queue.h) for a compile, a
  // pending input or an earlier queued launch, instead of reaching PJRT from the calling thread.
  std::atomic<int64_t> launches_queued{0};
  std::atomic<int64_t> h2d_transfers{0};
  std::atomic<int64_t> h2d_bytes{0};
  std::atomic<int64_t> d2h_transfers{0};
  std::atomic<int64_t> d2h_bytes{0};
  std::atomic<int64_t> d2d_transfers{0};
  std::atomic<int64_t> host_syncs{0};
  std::atomic<int64_t> cpu_fallbacks{0};
  // Collectives XLA ran inside programs (eager collective programs and compiled graphs: one per
  // collective op per launch, on each rank), and bytes collectives staged through host memory
  // (the gloo transport: device->host copies of inputs plus host->device copies of results).
  std::atomic<int64_t> collectives_in_program{0};
  // Modules built under torch.use_deterministic_algorithms(True), and of those the ones compiled
  // with XLA's deterministic-ops option (runtime/determinism.h): 0 on XLA:CPU and TPU, whose
  // programs are deterministic as compiled.
  std::atomic<int64_t> deterministic_programs{0};
  std::atomic<int64_t> deterministic_option_programs{0};
  std::atomic<int64_t> collective_host_bytes{0};
};

Metrics& metrics();
// Counts one CPU fallback of `op`; returns true the first time this op falls back.
bool record_fallback(const std::string& op);
std::map<std::string, int64_t> fallbacks_by_op();
void reset_metrics();

}  // namespace torchtpu::runtime
