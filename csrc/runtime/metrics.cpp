#include "runtime/metrics.h"

#include <mutex>
#include <set>

namespace torchtpu::runtime {
namespace {
std::mutex fallback_mutex;
std::map<std::string, int64_t>& fallback_counts() {
  static std::map<std::string, int64_t> m;
  return m;
}
}  // namespace

Metrics& metrics() {
  static Metrics m;
  return m;
}

bool record_fallback(const std::string& op) {
  metrics().cpu_fallbacks++;
  std::lock_guard<std::mutex> g(fallback_mutex);
  fallback_counts()[op]++;
  static std::set<std::string> warned;
  return warned.insert(op).second;
}

std::map<std::string, int64_t> fallbacks_by_op() {
  std::lock_guard<std::mutex> g(fallback_mutex);
  return fallback_counts();
}

void reset_metrics() {
  Metrics& m = metrics();
  for (auto* c : {&m.programs_compiled,
                  &m.compile_ns,
                  &m.cache_hits,
                  &m.cache_misses,
                  &m.program_cache_evictions,
                  &m.recompiles,
                  &m.modules_lowered,
                  &m.graph_cache_evictions,
                  &m.programs_shared,
                  &m.programs_upgraded,
                  &m.launches_queued,
                  &m.disk_cache_hits,
                  &m.disk_cache_misses,
                  &m.disk_cache_signature_hits,
                  &m.disk_cache_corrupt,
                  &m.disk_cache_writes,
                  &m.disk_cache_signature_writes,
                  &m.disk_cache_evictions,
                  &m.disk_cache_load_failures,
                  &m.executions,
                  &m.h2d_transfers,
                  &m.h2d_bytes,
                  &m.d2h_transfers,
                  &m.d2h_bytes,
                  &m.d2d_transfers,
                  &m.host_syncs,
                  &m.cpu_fallbacks,
                  &m.deterministic_programs,
                  &m.deterministic_option_programs,
                  &m.collectives_in_program,
                  &m.collective_host_bytes}) {
    c->store(0);
  }
  std::lock_guard<std::mutex> g(fallback_mutex);
  fallback_counts().clear();
}

}  // namespace torchtpu::runtime
