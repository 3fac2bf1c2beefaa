// Device-side checks, the CUDA device-assert way but recoverable. XLA clamps or drops
// out-of-range indices instead of faulting, so a program whose op indexes (gather, scatter,
// embedding, nll_loss targets...) also computes whether an index was out of range and returns
// those flags as one extra small output. The flags stay on the device with the in-flight work
// (reading them would make every op a host sync); the next sync of the device (item(), cpu(),
// synchronize(), an event wait) reads them and raises the op's error, after which the process
// is usable again. Under TPU_LAUNCH_BLOCKING=1 they are read at the op itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

enum class CheckError { kIndexError, kRuntimeError };

// One check of a program: what the CPU kernel would say. `message` may hold "{}", replaced by
// the offending value the program reports (an index, a target class).
struct CheckSpec {
  std::string op;  // "aten::gather"
  std::string message;
  CheckError error = CheckError::kIndexError;
};
using CheckSpecs = std::shared_ptr<const std::vector<CheckSpec>>;

// Keeps `flags` (a program's check output: s64[2 * specs.size()], per check (failed, value))
// until `device` next syncs. Under TPU_LAUNCH_BLOCKING=1 reads it now and raises.
void defer_checks(int device, std::shared_ptr<pjrt::Buffer> flags, CheckSpecs specs);

// Reads the deferred checks of `device` (-1: every device), forgets them, and raises the first
// failure as the CPU kernel's exception (IndexError or RuntimeError). `only_ready`: reads only
// those whose program has finished (an event wait must not block on later work).
void raise_failed_checks(int device, bool only_ready = false);

// Deferred checks not read yet (tests: nothing accumulates without a sync).
size_t deferred_check_count();

}  // namespace torchtpu::runtime
