// Launched-but-unfinished executions per device, so torch.tpu.synchronize() can wait for them
// and report an asynchronous failure.
#pragma once

#include <memory>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

void track_execution(int device, std::unique_ptr<pjrt::Event> done);
// Waits for every tracked execution on `device` (-1: all devices); throws the first error.
void wait_for_executions(int device);

}  // namespace torchtpu::runtime
