// Fused eager's internals (exec/fused_eager.h): the ops a device's pending region recorded, and
// how it runs them as one program.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "exec/call_state.h"
#include "exec/executor.h"
#include "exec/fused_eager.h"
#include "exec/op_plan.h"

namespace torchtpu::exec::fused {

// One recorded call, without its tensors: the storages it reads and writes are the region's,
// everything else it needs to become a node of a program is copied here.
struct RecordedOp {
  const OpPlan* plan = nullptr;
  std::shared_ptr<const OpEntry> entry;  // its one-op description (executor.h describe_native)
  std::string key;                       // the plan's address and the call's scan key
  // The call's parameters: storages (by raw pointer: the region holds them), runtime scalars,
  // CPU scalars (copied at the call), generators drawn at the call; then one storage per new
  // tensor (functional results).
  std::vector<Param> params;
  size_t num_scanned = 0;  // `params` from the call's scan (the new tensors' storages follow)
  // Per schema argument its slot over `params`, then per new tensor the view its result is
  // written through.
  std::vector<ArgDesc> args;
  size_t num_args = 0;              // schema arguments among `args`
  std::vector<c10::IValue> values;  // per schema argument: the call's value, None for tensors
  std::vector<int> writes;          // `params` the op writes (in place, out=, new tensors)
  int rng_param = -1;               // `params` index of the draw its lowering's rng source reads
  int64_t location = -1;            // its caller (set_location_hooks)
  // fill_/zero_ over all of its storage's bytes: the storage's value afterwards is `fill`
  // whatever it held (Region::constants).
  bool whole_fill = false;
  c10::Scalar fill;
  // Per parameter, its storage's entry in the region (null when not a storage).
  std::vector<struct Touched*> touched;
};

// Every storage a region's ops touch.
struct Touched {
  // The region's one strong reference: the storage is still readable after the region iff
  // someone else holds it too (use_count() > 1).
  c10::intrusive_ptr<c10::StorageImpl> storage;
  int born_by = -1;   // the op whose new tensor it is; -1: it existed before the region
  int first_op = -1;  // the first op that reads or writes it
  int last_op = -1;   // the last op that reads or writes it
  bool written = false;
  // Its parameter in the assembly numbered `epoch` (exec/fused_run.cpp).
  uint64_t epoch = 0;
  int param = -1;
};

// A storage whose pending value is a constant: the region's first op touching it filled all of
// it (ones_like, zeros: empty() then fill_/zero_) and no op wrote it since. A compiled graph
// reading it (autograd's ones_like(loss) and the zero grads it materializes for a compiled
// forward's unused outputs) gets that value without the region running, so those few ops do not
// become a program of their own between the forward and the backward graph: the region stays
// pending and runs with the ops that follow (exec/fused_eager.cpp on_deferred_access).
struct Constant {
  c10::Scalar value;
  std::vector<int64_t> sizes;  // the filled tensor's (it covers the storage)
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool landed = false;  // its buffer holds the value already (uploaded)
};

constexpr uint64_t kSkeletonSeed = 14695981039346656037ull;

struct Region {
  // ops[0, size) are recorded; the others keep their allocations for the next ones, so that a
  // steady loop records without allocating its bookkeeping again (as PooledCallState does).
  std::vector<RecordedOp> ops;
  size_t size = 0;
  std::unordered_map<c10::StorageImpl*, Touched> storages;
  std::unordered_map<c10::StorageImpl*, Constant> constants;
  // FNV-1a over the ops' plans: what a region computes regardless of shapes (churn detection).
  uint64_t skeleton = kSkeletonSeed;
  // Loop detection (exec/fused_eager.cpp): the periods L for which ops [L, size) repeat ops
  // [0, size - L) so far.
  std::vector<size_t> periods;
  // Regions cut as whole iterations of a loop, as FNV(skeleton, size): a later region that
  // reaches one of them is cut there. Kept from region to region (clear() keeps it).
  std::unordered_set<uint64_t> loops;
  // torch's numeric settings its ops were recorded under, the same for all of them.
  Numerics numerics;

  bool empty() const { return size == 0; }
  // The next op's slot, emptied (its vectors keep their capacity).
  RecordedOp& next();
  // Forgets the ops and drops the storages (keeping the slots).
  void clear();
};

// Runs the region's ops (as one program, or op by op when its program keeps missing the cache),
// lands their results in the storages that are still readable, and leaves `r` empty. The
// caller holds the device's region lock.
void run_region(Region& r, int device, Cause cause);

// The caller's location of a recorded op ("file.py:42 in f"), or "" when unknown.
std::string describe_location(int64_t id);

// Counts for stats(); set by run_region.
void count_program();
void count_replayed(int64_t ops);
void count_flush(Cause cause, bool churn);

// While alive, this thread's reads and writes of storages deferred by `device`'s region (-1:
// any device) do not run that region: the thread is recording into it or running it.
class InsideRegion {
 public:
  explicit InsideRegion(int device);
  ~InsideRegion();
  InsideRegion(const InsideRegion&) = delete;
  InsideRegion& operator=(const InsideRegion&) = delete;

 private:
  int previous_;
};

}  // namespace torchtpu::exec::fused
