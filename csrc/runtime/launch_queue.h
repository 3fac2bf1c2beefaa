// Launches that cannot reach PJRT yet: their program is still compiling (runtime/compile_pool.h)
// or an input is a pending buffer (pjrt::Buffer::pending). Each device has one ordered queue and
// one worker thread that waits for the compile and the inputs, executes, and resolves the
// launch's pending outputs; the host has long returned with tensors over those outputs. While a
// device's queue is not empty every later launch on it queues too, so launches reach PJRT in
// program order (a compiled graph's donation cannot overtake an earlier reader). The worker sees
// only what the launch captured when it was queued: buffers and the program, no tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pjrt/pjrt.h"
#include "runtime/compile.h"

namespace torchtpu::runtime {

// True while a launch queued on `device` has not reached PJRT: one atomic load, on every launch.
bool launch_queue_busy(int device);

// Queues a launch of `program` on `device`; `args` stay alive until it runs. Returns its
// outputs (program->num_outputs() of them), pending until it has run. A failed compile, launch
// or input fails the outputs with that error, which whoever reads them raises (and only they:
// runtime/inflight.h skip_reserved). `launch_id`: Program::execute's.
std::vector<std::shared_ptr<pjrt::Buffer>> enqueue_launch(
    std::shared_ptr<const Program> program, std::vector<std::shared_ptr<pjrt::Buffer>> args,
    int device, int launch_id = 0);

// Blocks until every queued launch has reached PJRT (process exit).
void wait_for_launch_queues();

}  // namespace torchtpu::runtime
