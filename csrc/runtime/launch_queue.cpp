#include "runtime/launch_queue.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "pjrt/fork_state.h"
#include "runtime/compile_pool.h"
#include "runtime/inflight.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::runtime {
namespace {

// As many as TORCHTPU_CPU_DEVICE_COUNT allows; a fixed array keeps the busy check a plain load.
constexpr int kMaxDevices = 4096;
std::array<std::atomic<int64_t>, kMaxDevices> queued{};  // per device: queued, not yet launched

struct Launch {
  std::shared_ptr<const Program> program;
  std::vector<std::shared_ptr<pjrt::Buffer>> args;
  std::vector<std::shared_ptr<pjrt::Buffer>> outputs;
  int device = 0;
  int launch_id = 0;
  uint64_t seq = 0;  // its place in the device's execution order (runtime/inflight.h)
};

struct DeviceQueue {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Launch> launches;
  bool started = false;
};

// Leaked on purpose: the workers outlive static destructors.
struct Queues {
  std::mutex mutex;
  std::condition_variable drained;  // a device's queue emptied
  std::map<int, std::unique_ptr<DeviceQueue>> devices;
};

Queues& queues() {
  static Queues* q = new Queues;
  return *q;
}

// Runs one launch; never throws: a failure lands in its outputs and the in-flight record.
void run(Launch& l) {
  std::string error;
  try {
    l.program->wait();
    std::vector<PJRT_Buffer*> raw;
    raw.reserve(l.args.size());
    for (const auto& a : l.args) raw.push_back(a->raw());  // a failed input throws its error
    pjrt::ExecuteResult r =
        l.program->execute(raw.data(), raw.size(), get().device(l.device), l.launch_id);
    metrics().executions++;
    if (r.outputs.size() != l.outputs.size()) {
      error = "torchtpu: " + l.program->signature() + " returned " +
              std::to_string(r.outputs.size()) + " outputs, expected " +
              std::to_string(l.outputs.size());
      track_reserved(l.device, l.seq, std::move(r.done));
      for (auto& o : l.outputs) o->fail(error);
      return;
    }
    for (size_t i = 0; i < r.outputs.size(); ++i) l.outputs[i]->resolve(r.outputs[i]->release());
    track_reserved(l.device, l.seq, std::move(r.done));
    return;
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  for (auto& o : l.outputs) o->fail(error);
  skip_reserved(l.device, l.seq);
}

void worker(int device, DeviceQueue* q) {
  for (;;) {
    Launch l;
    {
      std::unique_lock<std::mutex> lk(q->mutex);
      q->arrived.wait(lk, [&] { return !q->launches.empty(); });
      l = std::move(q->launches.front());
      q->launches.pop_front();
    }
    run(l);
    l = Launch();  // its inputs go now
    // After the outputs resolved: a launch that then finds the queue idle and its inputs ready
    // may go straight to PJRT.
    if (queued[static_cast<size_t>(device)].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      Queues& all = queues();
      std::lock_guard<std::mutex> g(all.mutex);
      all.drained.notify_all();
    }
  }
}

void drain_at_exit() {
  if (pjrt::in_forked_child()) return;  // the parent's threads do not exist here
  hold_compiles(false);
  wait_for_launch_queues();
}

}  // namespace

bool launch_queue_busy(int device) {
  return device >= 0 && device < kMaxDevices &&
         queued[static_cast<size_t>(device)].load(std::memory_order_acquire) != 0;
}

std::vector<std::shared_ptr<pjrt::Buffer>> enqueue_launch(
    std::shared_ptr<const Program> program, std::vector<std::shared_ptr<pjrt::Buffer>> args,
    int device, int launch_id) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "torchtpu: no launch queue for tpu:", device);
  Runtime& rt = get();
  Launch l;
  l.outputs.reserve(program->num_outputs());
  for (size_t i = 0; i < program->num_outputs(); ++i) {
    l.outputs.push_back(pjrt::Buffer::pending(rt.client().plugin()));
  }
  std::vector<std::shared_ptr<pjrt::Buffer>> outputs = l.outputs;
  l.program = std::move(program);
  l.args = std::move(args);
  l.device = device;
  l.launch_id = launch_id;
  Queues& all = queues();
  DeviceQueue* q;
  {
    std::lock_guard<std::mutex> g(all.mutex);
    static const bool registered = std::atexit(drain_at_exit) == 0;
    (void)registered;
    auto& slot = all.devices[device];
    if (!slot) slot = std::make_unique<DeviceQueue>();
    q = slot.get();
  }
  {
    std::lock_guard<std::mutex> g(q->mutex);
    queued[static_cast<size_t>(device)].fetch_add(1, std::memory_order_acq_rel);
    l.seq = reserve_execution(device);
    q->launches.push_back(std::move(l));
    if (!q->started) {
      q->started = true;
      std::thread(worker, device, q).detach();
    }
  }
  q->arrived.notify_one();
  metrics().launches_queued++;
  return outputs;
}

void wait_for_launch_queues() {
  Queues& all = queues();
  std::unique_lock<std::mutex> lk(all.mutex);
  all.drained.wait(lk, [&] {
    for (const auto& [d, q] : all.devices) {
      if (queued[static_cast<size_t>(d)].load() != 0) return false;
    }
    return true;
  });
}

}  // namespace torchtpu::runtime
