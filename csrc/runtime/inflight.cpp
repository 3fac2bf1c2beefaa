#include "runtime/inflight.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/interrupt.h"

namespace torchtpu::runtime {
namespace {

struct DeviceState {
  // Keeps the PJRT events alive until they are awaited or pruned; synchronize awaits them so
  // it reports the plugin's error as the plugin words it.
  std::deque<std::unique_ptr<pjrt::Event>> pending;
  uint64_t launched = 0;  // executions are numbered 1, 2, ... per device in launch order
  uint64_t finished = 0;  // every execution numbered <= finished has completed
  std::set<uint64_t> finished_early;  // completed while an earlier one still runs
  // Failures seen by the completion callbacks and not yet reported by a device synchronize.
  std::map<uint64_t, std::string> failures;
  std::multimap<uint64_t, std::shared_ptr<Marker>> waiting;  // markers by captured seq
};

// Leaked on purpose: plugin threads may still run completion callbacks while the process exits
// and static destructors run.
struct State {
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::map<int, DeviceState> devices;
};
State& state() {
  static State* s = new State;
  return *s;
}
// Waits on the condition; on the interruptible (main) thread it wakes now and then so that
// Ctrl-C raises KeyboardInterrupt here instead of after all queued work (runtime/interrupt.h).
template <class Pred>
void wait_interruptibly(std::unique_lock<std::mutex>& lk, std::condition_variable& cv, Pred done) {
  if (!interruptible_here()) {
    cv.wait(lk, done);
    return;
  }
  while (!cv.wait_for(lk, std::chrono::milliseconds(20), done)) {
    lk.unlock();
    check_interrupt();
    lk.lock();
  }
}

// Checking readiness costs a plugin call: prune finished events only now and then.
constexpr size_t kPruneThreshold = 256;

// Counts execution `seq` of `s` finished and completes the markers it completes; the state's
// mutex is held.
void mark_finished(DeviceState& s, uint64_t seq) {
  if (seq == s.finished + 1) {
    s.finished = seq;
    while (!s.finished_early.empty() && *s.finished_early.begin() == s.finished + 1) {
      s.finished = *s.finished_early.begin();
      s.finished_early.erase(s.finished_early.begin());
    }
  } else {
    s.finished_early.insert(seq);
  }
  if (s.waiting.empty() || s.waiting.begin()->first > s.finished) return;
  auto now = std::chrono::steady_clock::now();
  while (!s.waiting.empty() && s.waiting.begin()->first <= s.finished) {
    Marker& m = *s.waiting.begin()->second;
    m.completed = now;
    m.done.store(true, std::memory_order_release);
    s.waiting.erase(s.waiting.begin());
  }
}

// Runs on a plugin thread when execution `seq` of `device` finishes.
void note_finished(int device, uint64_t seq, const std::string& error) {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mutex);
  DeviceState& s = st.devices[device];
  if (!error.empty()) s.failures.emplace(seq, error);
  mark_finished(s, seq);
  st.finished_cv.notify_all();
}

// Follows execution `seq` of `device` until its completion callback counts it finished.
void watch(int device, uint64_t seq, std::unique_ptr<pjrt::Event> done);

}  // namespace

void track_execution(int device, std::unique_ptr<pjrt::Event> done) {
  State& st = state();
  auto& mutex = st.mutex;
  auto& devices = st.devices;
  if (!done) return;
  // XLA:CPU runs a small program inside Execute, so its event is ready, and OK, by now. Such an
  // execution is finished on arrival: numbering it and counting it done under one lock replaces
  // a completion callback (an allocation and a second lock, per op) and keeping its event for
  // synchronize. A failed or still-running execution takes the path below, which reports its
  // error as before.
  bool finished_ok = false;
  try {
    finished_ok = done->poll();  // throws the execution's error
  } catch (const pjrt::Error&) {
  }
  if (finished_ok) {
    std::lock_guard<std::mutex> g(mutex);
    DeviceState& s = devices[device];
    mark_finished(s, ++s.launched);
    st.finished_cv.notify_all();
    return;
  }
  uint64_t seq;
  {
    std::lock_guard<std::mutex> g(mutex);
    seq = ++devices[device].launched;
  }
  watch(device, seq, std::move(done));
}

uint64_t reserve_execution(int device) {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mutex);
  return ++st.devices[device].launched;
}

void track_reserved(int device, uint64_t seq, std::unique_ptr<pjrt::Event> done) {
  if (!done) return skip_reserved(device, seq);
  watch(device, seq, std::move(done));
}

void skip_reserved(int device, uint64_t seq) { note_finished(device, seq, std::string()); }

namespace {

void watch(int device, uint64_t seq, std::unique_ptr<pjrt::Event> done) {
  State& st = state();
  auto& mutex = st.mutex;
  auto& devices = st.devices;
  // Registered without the lock held: the plugin may run the callback right here when the
  // execution already finished.
  try {
    done->on_ready([device, seq](const std::string& error) { note_finished(device, seq, error); });
  } catch (const pjrt::Error&) {
    // A plugin that cannot call back: wait now so markers stay right (as if launch-blocking).
    std::string error;
    try {
      done->await();
    } catch (const pjrt::Error& e) {
      error = e.what();
    }
    note_finished(device, seq, error);
  }
  std::lock_guard<std::mutex> g(mutex);
  auto& q = devices[device].pending;
  q.push_back(std::move(done));
  if (q.size() >= kPruneThreshold) {
    while (!q.empty() && q.front()->is_ready()) {
      // A failed execution stays queued so that synchronize() still reports it.
      try {
        q.front()->await();
      } catch (const pjrt::Error&) {
        break;
      }
      q.pop_front();
    }
  }
}

}  // namespace

void wait_for_executions(int device) {
  State& st = state();
  auto& mutex = st.mutex;
  auto& finished_cv = st.finished_cv;
  auto& devices = st.devices;
  std::deque<std::unique_ptr<pjrt::Event>> events;
  std::vector<std::pair<int, uint64_t>> targets;
  if (interruptible_here()) {
    // Wait for completions first, interruptibly, leaving the events queued: an interrupt then
    // leaves this device's state as it was.
    std::unique_lock<std::mutex> lk(mutex);
    for (auto& [d, s] : devices) {
      if (device < 0 || d == device) targets.emplace_back(d, s.launched);
    }
    for (const auto& t : targets) {
      wait_interruptibly(lk, finished_cv, [&] { return devices[t.first].finished >= t.second; });
    }
    targets.clear();
  }
  {
    std::lock_guard<std::mutex> g(mutex);
    for (auto& [d, s] : devices) {
      if (device >= 0 && d != device) continue;
      for (auto& e : s.pending) events.push_back(std::move(e));
      s.pending.clear();
      targets.emplace_back(d, s.launched);
    }
  }
  std::string first_error;
  for (auto& e : events) {
    try {
      e->await();
    } catch (const pjrt::Error& err) {
      if (first_error.empty()) first_error = err.what();
    }
  }
  // The completion callbacks may run a little after Await returns; wait for them too, so an
  // event recorded before this call queries true after it. This also covers executions another
  // thread numbered but had not queued yet when we took `pending`.
  {
    std::unique_lock<std::mutex> lk(mutex);
    for (const auto& t : targets) {
      const int d = t.first;
      const uint64_t target = t.second;
      finished_cv.wait(lk, [&] { return devices[d].finished >= target; });
      auto& failures = devices[d].failures;
      for (auto it = failures.begin(); it != failures.end() && it->first <= target;) {
        if (first_error.empty()) first_error = it->second;
        it = failures.erase(it);
      }
    }
  }
  TORCH_CHECK(first_error.empty(), "torchtpu: an asynchronous execution failed: ", first_error);
}

bool executions_finished(int device) {
  State& st = state();
  auto& mutex = st.mutex;
  auto& devices = st.devices;
  std::lock_guard<std::mutex> g(mutex);
  auto it = devices.find(device);
  return it == devices.end() || it->second.finished >= it->second.launched;
}

std::shared_ptr<Marker> record_marker(int device) {
  State& st = state();
  auto& mutex = st.mutex;
  auto& devices = st.devices;
  auto m = std::make_shared<Marker>();
  m->device = device;
  std::lock_guard<std::mutex> g(mutex);
  DeviceState& s = devices[device];
  m->seq = s.launched;
  if (s.finished >= m->seq) {
    m->completed = std::chrono::steady_clock::now();
    m->done.store(true, std::memory_order_release);
  } else {
    s.waiting.emplace(m->seq, m);
  }
  return m;
}

void wait_marker(const Marker& m) {
  State& st = state();
  auto& mutex = st.mutex;
  auto& finished_cv = st.finished_cv;
  auto& devices = st.devices;
  std::unique_lock<std::mutex> lk(mutex);
  wait_interruptibly(lk, finished_cv, [&] { return marker_done(m); });
  const auto& failures = devices[m.device].failures;
  if (!failures.empty() && failures.begin()->first <= m.seq) {
    TORCH_CHECK(false, "torchtpu: an asynchronous execution failed: ", failures.begin()->second);
  }
}

}  // namespace torchtpu::runtime
