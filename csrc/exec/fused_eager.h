// Fused eager (TorchTPU's DEFER_AND_FUSE): instead of launching one program per op, ops on tpu
// tensors record into a pending region of their device and the region runs as ONE program,
// built by the same engine (exec/program.h's build over a many-node ProgramSpec, the one
// lowering table, the program and disk caches, typed signatures).
//
// A recorded op returns at once with tensors over new storages that hold no buffer yet; their
// StorageHandles are marked deferred, so any read of their buffer (a host copy, an op that is not
// recorded, a compiled graph) first runs the region, and the outputs land in those storages.
// Views, in-place writes and aliases keep strict eager's semantics because the region is a
// program over storages: a node reads a view of a storage's latest contents and writes its
// results into a view of a storage, exactly what a strict launch does buffer by buffer.
//
// Where a region ends comes from the op stream alone, never from timing: a materialization
// (host read, synchronize, event), an op that cannot be recorded (no lowering, CPU fallback, a
// data-dependent shape's host read), a collective, a compiled graph reading a pending tensor, a
// size limit, or a recognised repeated op sequence. So every rank running the same code cuts the
// same programs.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/op_plan.h"

namespace torchtpu::exec::fused {

// Why a region ran (torchtpu.metrics()["fused_flushes_by_cause"]).
enum class Cause : int {
  kMaterialization,  // a host read of a tpu tensor (.cpu(), .item(), printing...)
  kUnsupported,      // an op that is not recorded: CPU fallback, no meta kernel, user module
  kCollective,       // a c10d collective on the device
  kSync,             // torch.tpu.synchronize(), mark_step(), an event, leaving fused mode
  kSize,             // the region reached TORCHTPU_FUSED_MAX_OPS
  kLoop,             // the op stream repeats a sequence: the region is one iteration
  kGraph,            // a compiled graph (or other engine access) reads or writes a pending storage
  kCount
};
const char* cause_name(Cause c);

// Whether ops record (process-wide; TORCH_TPU_DEFER_AND_FUSE=1 at startup). One atomic load.
bool enabled();
// Turning it off runs every pending region first.
void set_enabled(bool on);

// run_native's entry: records the call into its device's region. kEager: not recordable here
// (the region was run first: the caller launches it as strict eager); kFallback: the CPU must
// run it (`reason`), the region was run first.
enum class Recorded { kRecorded, kEager, kFallback };
Recorded record(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                std::string* reason);

// Runs `device`'s pending region (-1: the current device's and those this thread recorded on).
void flush(int device, Cause cause);

// While one lives on a thread, ops there run strictly (after their device's region ran): a
// collective's completion thread must never insert work into a region at a moment that depends
// on the network.
class StrictScope {
 public:
  StrictScope();
  ~StrictScope();
  StrictScope(const StrictScope&) = delete;
  StrictScope& operator=(const StrictScope&) = delete;

 private:
  bool previous_;
};

// While one lives on a thread, a region that a storage access there runs counts as `cause`
// (a host read's gather of a pending view, say, is a materialization).
class CauseScope {
 public:
  explicit CauseScope(Cause cause);
  ~CauseScope();
  CauseScope(const CauseScope&) = delete;
  CauseScope& operator=(const CauseScope&) = delete;

 private:
  Cause previous_;
};

// Where a recorded op was called from, for errors: `capture` returns an id (or -1) cheaply at
// the call; `describe` turns it into "file.py:42 in f" when an error needs it. Installed by the
// Python bindings (the engine knows no Python).
using CaptureLocation = int64_t (*)();
using DescribeLocation = std::string (*)(int64_t id);
void set_location_hooks(CaptureLocation capture, DescribeLocation describe);

struct Stats {
  int64_t programs = 0;      // fused programs launched
  int64_t ops = 0;           // ops recorded
  int64_t replayed_ops = 0;  // ops of churning regions run as one program each
  std::array<int64_t, static_cast<int>(Cause::kCount) + 1> flushes{};  // + churn fallbacks
};
Stats stats();
void reset_stats();

// Tests: the next `n` whole-region builds fail (as a region that does not lower as one program
// would), so the op-by-op path and its log line can be checked.
void fail_builds_for_tests(int n);

// The signatures of the fused programs launched, in order, while logging is on (tests compare
// ranks' sequences); turning it on clears it.
void set_launch_log(bool on);
std::vector<std::string> launch_log();

}  // namespace torchtpu::exec::fused
