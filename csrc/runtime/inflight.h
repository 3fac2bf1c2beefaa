// Launched-but-unfinished executions per device, so torch.tpu.synchronize() can wait for them
// and report an asynchronous failure, and so events can mark a point in a device's work.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

void track_execution(int device, std::unique_ptr<pjrt::Event> done);
// A launch queued before it can run (runtime/launch_queue.h) takes its place in the device's
// order now, so that synchronize, events and markers recorded after it wait for it.
uint64_t reserve_execution(int device);
// The reserved launch `seq` reached PJRT; `done` fires when it finishes.
void track_reserved(int device, uint64_t seq, std::unique_ptr<pjrt::Event> done);
// It never ran (its compile, launch or an input failed). Its outputs carry the error to
// whoever reads them; synchronize does not raise it too, so it is reported once per read
// result, never again at a later, unrelated sync.
void skip_reserved(int device, uint64_t seq);
// Waits for every tracked execution on `device` (-1: all devices); throws the first error.
void wait_for_executions(int device);
// True when every execution launched on `device` so far has finished.
bool executions_finished(int device);

// A point in a device's launch order: every execution launched on the device before the
// marker was recorded. PJRT may run independent executions of one device concurrently and
// finish them out of order, so a marker completes when all of them have finished, not when
// the latest one has.
struct Marker {
  int device = 0;
  uint64_t seq = 0;  // executions numbered 1..seq on `device` are captured
  std::atomic<bool> done{false};
  // Steady-clock time at which the last captured execution finished (observed from the PJRT
  // completion callback), or the record time if nothing captured was still running then.
  // Written once, before `done` is set.
  std::chrono::steady_clock::time_point completed;
};

std::shared_ptr<Marker> record_marker(int device);
inline bool marker_done(const Marker& m) { return m.done.load(std::memory_order_acquire); }
// Blocks until the marker completes; throws if a captured execution failed (and
// torch.tpu.synchronize has not already reported that failure).
void wait_marker(const Marker& m);

}  // namespace torchtpu::runtime
