// What torch.profiler sees of the device: the launch, compile, transfer, sync and CPU-fallback
// paths call these hooks, and a profiler session (csrc/profiler/) switches recording on and
// turns the records into Kineto activities. With no profiler running a hook costs one relaxed
// atomic load, so the paths call them unconditionally.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchtpu::pjrt {
class Event;
}

namespace torchtpu::runtime::trace {

enum class Kind : uint8_t {
  kExecution,  // one program run on a device: [estimated device start, completion]
  kLaunch,     // the host side of enqueuing that program
  kCompile,    // building or loading one program (detail: how the cache answered)
  kH2D,        // host -> device copy (bytes)
  kD2H,        // device -> host copy (bytes); the host waits for it
  kSync,       // the host waits for the device's queued work
  kFallback,   // an op that ran on the CPU instead (name: the op)
};

struct Record {
  Kind kind = Kind::kExecution;
  std::string name;    // op or graph name: "aten::add.Tensor", "graph forward_0", "copy_h2d"
  std::string detail;  // the full signature, a cache outcome, ...
  int device = -1;     // torch device index, -1 for host-only work
  int64_t start_ns = 0;
  int64_t end_ns = 0;         // both on c10::getTime()'s clock, the one torch.profiler uses
  int64_t launch_end_ns = 0;  // executions: when enqueuing returned
  int64_t bytes = 0;
  uint64_t seq = 0;          // executions: launch order, process-wide
  uint64_t correlation = 0;  // innermost CPU op being profiled on the launching thread (0: none)
  int64_t thread = 0;        // system thread id of the host side
};

namespace detail {
extern std::atomic<bool> recording;
}
inline bool enabled() { return detail::recording.load(std::memory_order_relaxed); }

int64_t now_ns();

// --- the profiler's side ---
void start_recording();
void stop_recording();
// Every record finished so far, in the order they finished; clears them.
std::vector<Record> take_records();
// Waits up to `timeout` for traced executions whose completion has not arrived yet, so a trace
// that stops right after launching still sees them end. True when none is left.
bool wait_for_traced_executions(std::chrono::milliseconds timeout);
// Torch's profiler announces the CPU op it is inside (per thread), so device work can name the
// op that launched it.
void push_correlation(uint64_t id);
void pop_correlation();

// --- the runtime's side ---
// A program was just enqueued: `start_ns` is when enqueuing began (0 when tracing was off
// then). Registers for `done` (null: finished already) and records the execution on completion.
void execution_launched(const std::string& signature, int device, int64_t start_ns,
                        pjrt::Event* done);

// Host-side work from construction to destruction: compile, transfer, sync, fallback.
class Scope {
 public:
  Scope(Kind kind, std::string_view name, int device = -1, int64_t bytes = 0,
        std::string_view detail = {})
      : active_(enabled()) {
    if (active_) begin(kind, name, device, bytes, detail);
  }
  ~Scope() {
    if (active_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  // Filled in once known (a compile's cache outcome); ignored when not recording.
  void set_detail(std::string_view detail);

 private:
  void begin(Kind kind, std::string_view name, int device, int64_t bytes, std::string_view detail);
  void end();
  bool active_;
  Record record_;
};

}  // namespace torchtpu::runtime::trace
