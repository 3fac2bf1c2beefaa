#include "runtime/device_checks.h"

#include <c10/util/Exception.h>

#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "pjrt/fork_state.h"
#include "runtime/runtime.h"

namespace torchtpu::runtime {
namespace {

struct Deferred {
  std::shared_ptr<pjrt::Buffer> flags;
  CheckSpecs specs;
};

struct Failure {
  CheckError error;
  std::string message;
};

struct DeviceChecks {
  std::deque<Deferred> pending;
  // A failure found while trimming `pending` at a launch: raised at the next sync, as if read
  // there.
  std::optional<Failure> failure;
};

// Leaked on purpose, like the in-flight state: plugin threads may outlive static destructors.
struct State {
  std::mutex mutex;
  std::map<int, DeviceChecks> devices;
};
State& state() {
  static State* s = new State;
  return *s;
}

// A loop that never syncs must not pile up flag buffers: past this many, the finished ones are
// read at launch (a small device->host copy each) and the oldest waited for.
constexpr size_t kMaxDeferred = 512;

std::string with_value(std::string message, int64_t value) {
  auto at = message.find("{}");
  if (at != std::string::npos) message.replace(at, 2, std::to_string(value));
  return message;
}

// The first failed check of one program, if any. An execution that failed outright is
// reported by the in-flight tracking with the plugin's message, not here.
std::optional<Failure> read(const Deferred& d, bool at_op) {
  size_t n = d.specs->size();
  std::vector<int64_t> host(2 * n);
  try {
    d.flags->to_host(host.data(), host.size() * sizeof(int64_t));
  } catch (const pjrt::Error&) {
    return std::nullopt;
  }
  for (size_t i = 0; i < n; ++i) {
    if (host[2 * i] == 0) continue;
    const CheckSpec& s = (*d.specs)[i];
    std::string where = at_op ? " (" + s.op + " on tpu, device-side check)"
                              : " (" + s.op +
                                    " on tpu: a device-side check read when the device synced; "
                                    "TPU_LAUNCH_BLOCKING=1 raises it at the op)";
    return Failure{s.error, with_value(s.message, host[2 * i + 1]) + where};
  }
  return std::nullopt;
}

[[noreturn]] void raise(const Failure& f) {
  if (f.error == CheckError::kIndexError) TORCH_CHECK_INDEX(false, f.message);
  TORCH_CHECK(false, f.message);
}

bool ready(const Deferred& d) {
  // Its program is still compiling or queued: not finished (asking the plugin would wait).
  if (!d.flags->ready()) return false;
  try {
    return d.flags->ready_event()->is_ready();
  } catch (const pjrt::Error&) {
    return true;  // reading it reports nothing and drops it
  }
}

}  // namespace

void defer_checks(int device, std::shared_ptr<pjrt::Buffer> flags, CheckSpecs specs) {
  Deferred d{std::move(flags), std::move(specs)};
  if (launch_blocking()) {
    if (auto f = read(d, /*at_op=*/true)) raise(*f);
    return;
  }
  State& st = state();
  std::deque<Deferred> trimmed;
  {
    std::lock_guard<std::mutex> g(st.mutex);
    DeviceChecks& dc = st.devices[device];
    dc.pending.push_back(std::move(d));
    if (dc.pending.size() < kMaxDeferred) return;
    // The finished ones at the front, then half of the rest whether finished or not.
    while (!dc.pending.empty() &&
           (ready(dc.pending.front()) || dc.pending.size() > kMaxDeferred / 2)) {
      trimmed.push_back(std::move(dc.pending.front()));
      dc.pending.pop_front();
    }
  }
  std::optional<Failure> first;
  for (const Deferred& t : trimmed) {
    if (first) break;
    first = read(t, /*at_op=*/false);
  }
  if (first) {
    std::lock_guard<std::mutex> g(st.mutex);
    DeviceChecks& dc = st.devices[device];
    if (!dc.failure) dc.failure = std::move(first);
  }
}

void raise_failed_checks(int device, bool only_ready) {
  if (pjrt::in_forked_child()) return;  // the parent's flags: not readable here
  State& st = state();
  std::deque<Deferred> taken;
  std::optional<Failure> first;
  {
    std::lock_guard<std::mutex> g(st.mutex);
    for (auto& [d, dc] : st.devices) {
      if (device >= 0 && d != device) continue;
      if (dc.failure && !first) first = std::move(dc.failure);
      dc.failure.reset();
      if (only_ready) {
        // Programs finish in launch order on a device in practice; stop at the first one
        // still running so that later checks keep their place.
        while (!dc.pending.empty() && ready(dc.pending.front())) {
          taken.push_back(std::move(dc.pending.front()));
          dc.pending.pop_front();
        }
      } else {
        for (auto& p : dc.pending) taken.push_back(std::move(p));
        dc.pending.clear();
      }
    }
  }
  // Like CUDA's device asserts, the first failure is reported; the others are dropped with it.
  for (const Deferred& t : taken) {
    if (first) break;
    first = read(t, /*at_op=*/false);
  }
  if (first) raise(*first);
}

size_t deferred_check_count() {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mutex);
  size_t n = 0;
  for (const auto& [d, dc] : st.devices) n += dc.pending.size();
  return n;
}

}  // namespace torchtpu::runtime
