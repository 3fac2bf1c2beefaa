#include "runtime/inflight.h"

#include <c10/util/Exception.h>

#include <deque>
#include <map>
#include <mutex>

namespace torchtpu::runtime {
namespace {

std::mutex mutex;
std::map<int, std::deque<std::unique_ptr<pjrt::Event>>> pending;
// Checking readiness costs a plugin call: prune finished events only now and then.
constexpr size_t kPruneThreshold = 256;

}  // namespace

void track_execution(int device, std::unique_ptr<pjrt::Event> done) {
  if (!done) return;
  std::lock_guard<std::mutex> g(mutex);
  auto& q = pending[device];
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

void wait_for_executions(int device) {
  std::deque<std::unique_ptr<pjrt::Event>> events;
  {
    std::lock_guard<std::mutex> g(mutex);
    for (auto& [d, q] : pending) {
      if (device >= 0 && d != device) continue;
      for (auto& e : q) events.push_back(std::move(e));
      q.clear();
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
  TORCH_CHECK(first_error.empty(), "torchtpu: an asynchronous execution failed: ", first_error);
}

}  // namespace torchtpu::runtime
