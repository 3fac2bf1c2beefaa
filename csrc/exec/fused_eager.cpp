// Fused eager's front: the mode, recording a call into its device's region, and the points
// where a region runs (exec/fused_eager.h). Running a region is exec/fused_run.cpp.
#include "exec/fused_eager.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "config/config.h"
#include "device/current_device.h"
#include "device/generator.h"
#include "device/storage.h"
#include "exec/executor.h"
#include "exec/fused_region.h"
#include "exec/host_transfer.h"
#include "lowering/lowering.h"
#include "runtime/metrics.h"
#include "runtime/program_cache.h"
#include "runtime/runtime.h"

namespace torchtpu::exec::fused {
namespace {

std::atomic<bool> on{[] {
  try {
    return config::flag("TORCH_TPU_DEFER_AND_FUSE", false);
  } catch (...) {
    return false;
  }
}()};

// Ops per region before it runs: a loop that never reads a value still runs in bounded programs.
size_t max_ops() {
  static const size_t n =
      static_cast<size_t>(config::positive_int("TORCHTPU_FUSED_MAX_OPS", 4096, 1 << 20));
  return n;
}

// -2: not inside any region; -1: recording (the device is not known yet); else that device.
thread_local int inside = -2;
thread_local bool strict_here = false;
// What a storage access on this thread that runs a region counts as (CauseScope).
thread_local Cause access_cause = Cause::kGraph;
// Devices this thread recorded on since they last ran (flush(-1) runs them).
thread_local uint64_t recorded_on = 0;

struct DeviceRegion {
  std::mutex mutex;
  Region region;
};

constexpr int kMaxDevices = 64;

DeviceRegion& region_of(int device) {
  static DeviceRegion* regions = new DeviceRegion[kMaxDevices];  // leaked: threads outlive exit
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "torchtpu: fused eager: bad device ", device);
  return regions[device];
}

// Calls' descriptions by signature key: a hit records without meta kernels or lowering.
runtime::ProgramCache<OpEntry>& descriptions() {
  static auto* c = new runtime::ProgramCache<OpEntry>();
  return *c;
}

struct Counters {
  std::atomic<int64_t> programs{0}, ops{0}, replayed{0};
  std::array<std::atomic<int64_t>, static_cast<int>(Cause::kCount) + 1> flushes{};
};
Counters& counters() {
  static Counters c;
  return c;
}

std::atomic<CaptureLocation> capture_hook{nullptr};
std::atomic<DescribeLocation> describe_hook{nullptr};

// A filled constant uploaded rather than computed by a program: at most this many bytes.
constexpr size_t kMaxConstantUpload = 4096;

// A read of a storage whose pending value is a constant (Region::constants): gives the reader
// that value without running the region, which stays pending. A never-written storage filled
// with zeros reads as zeros already (every program folds a storage without a buffer as zeros);
// another small constant is uploaded into it once. The region's own fill still runs later and
// writes the same value; it reads nothing of the storage (a whole-storage write), so a reader
// that donated the uploaded buffer meanwhile does no harm. False: the region must run.
bool read_constant(Region& r, const device::StorageHandle& h) {
  Constant* found = nullptr;
  for (auto& [st, constant] : r.constants) {
    if (st->data_ptr().get_context() == &h) found = &constant;
  }
  if (found == nullptr) return false;
  Constant& c = *found;
  if (c.landed) return true;
  // Inside the region's scope (the caller's InsideRegion): neither reads nor writes the region.
  auto& handle = const_cast<device::StorageHandle&>(h);
  const bool zero = c.value.isBoolean()   ? !c.value.toBool()
                    : c.value.isComplex() ? c.value.toComplexDouble() == c10::complex<double>()
                    : c.value.isFloatingPoint() ? c.value.toDouble() == 0.0
                                                : c.value.toLong() == 0;
  if (zero && !handle.buffer()) return true;
  at::Tensor host = at::empty(c.sizes, at::TensorOptions().dtype(c.dtype));
  if (host.nbytes() > kMaxConstantUpload) return false;
  host.fill_(c.value);  // the CPU's fill_: the same conversion as the op's
  handle.set_buffer(upload_lent(host, h.device_index()), device::buffer_dims(host.sizes()),
                    lowering::to_element_type(c.dtype));
  c.landed = true;
  return true;
}

// A storage access outside the recorder: run the region that defers it first, so the reader
// sees its results and a writer lands after its reads.
void on_deferred_access(const device::StorageHandle& h, bool write) {
  const int device = h.device_index();
  if (inside == -1 || inside == device) return;
  DeviceRegion& d = region_of(device);
  std::lock_guard<std::mutex> g(d.mutex);
  // Run by another thread meanwhile (its flags are then clear): nothing to do.
  const auto state = h.deferred();
  if (state == device::StorageHandle::Deferred::kNone) return;
  if (!write && state != device::StorageHandle::Deferred::kWritten) return;
  if (d.region.empty()) return;
  InsideRegion in(device);
  // A host read runs the region anyway (materialization); a graph's read need not.
  if (!write && access_cause == Cause::kGraph && read_constant(d.region, h)) return;
  run_region(d.region, device, access_cause);
}

const bool hook_installed = [] {
  device::set_deferred_hook(&on_deferred_access);
  return true;
}();

// `v[at] = x`, growing `v` when needed: slots are assigned, so their own vectors keep capacity.
template <typename T>
T& slot(std::vector<T>& v, size_t at) {
  if (at == v.size()) v.emplace_back();
  return v[at];
}

// The new tensors of a functional call, over storages without buffers yet.
void make_outputs(const OpEntry& e, int device, RecordedOp& op, std::vector<at::Tensor>& out) {
  size_t nparams = op.params.size(), nargs = op.args.size();
  for (const OutputSink& o : e.outputs) {
    if (o.to_storage || o.to_cpu_input) continue;
    at::Tensor t = wrap_buffer(nullptr, o.dims, o.sizes, o.strides, o.dtype, device);
    Param& p = slot(op.params, nparams);
    p.kind = Param::Kind::kStorage;
    p.storage = t.storage().unsafeGetStorageImpl();
    p.buffer.reset();
    p.dims = o.dims;
    p.dtype = o.element_type;
    ArgDesc& d = slot(op.args, nargs++);
    d.reset();
    d.kind = ArgDesc::Kind::kTensor;
    d.param = static_cast<int>(nparams++);
    d.dtype = o.dtype;
    d.view.sizes = o.sizes;
    if (o.strides.empty()) {
      d.view.strides.assign(t.strides().begin(), t.strides().end());
    } else {
      d.view.strides = o.strides;
    }
    op.writes.push_back(d.param);
    out.push_back(std::move(t));
  }
  op.params.resize(nparams);
  op.args.resize(nargs);
}

// Draws the generators the call's program would draw at its launch (launch_program), in the
// same order and amounts, so that random values equal strict eager's.
void draw(const OpEntry& e, int device, const torch::jit::Stack& stack, RecordedOp& op) {
  for (int index : e.used_params) {
    if (index >= 0 && op.params[static_cast<size_t>(index)].kind != Param::Kind::kGenerator) {
      continue;
    }
    std::optional<at::Generator> gen;
    Param* p = nullptr;
    if (index >= 0) {
      p = &op.params[static_cast<size_t>(index)];
      const c10::IValue& g = stack[p->arg_index];
      if (g.isGenerator()) gen = g.toGenerator();
    } else {
      Param drawn;
      drawn.kind = Param::Kind::kGenerator;
      drawn.dtype = shlo::ElementType::kU64;
      op.rng_param = static_cast<int>(op.params.size());
      op.params.push_back(std::move(drawn));
      p = &op.params.back();
    }
    auto [seed, offset] =
        device::next_seed_offset(gen, static_cast<c10::DeviceIndex>(device), e.rng_numel);
    p->drawn = true;
    p->seed_offset[0] = seed;
    p->seed_offset[1] = offset;
  }
}

void mark_written(const ArgDesc& d, RecordedOp& op) {
  if (d.kind == ArgDesc::Kind::kTensor) op.writes.push_back(d.param);
  for (const ArgDesc& item : d.items) mark_written(item, op);
}

uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

// Adds the op in the region's next slot to the region and marks its storages deferred (the
// region lock held).
void append(Region& r) {
  RecordedOp& op = r.ops[r.size];
  const int index = static_cast<int>(r.size);
  op.touched.assign(op.params.size(), nullptr);
  for (size_t j = 0; j < op.params.size(); ++j) {
    Param& p = op.params[j];
    if (p.kind != Param::Kind::kStorage) continue;
    // The region reads a storage's buffer when it runs (run_region), not the call's snapshot.
    p.buffer.reset();
    auto [it, fresh] = r.storages.try_emplace(p.storage);
    Touched& t = it->second;
    if (fresh) {
      t.storage = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(p.storage);
      if (j >= op.num_scanned) t.born_by = index;
      t.first_op = index;
    }
    t.last_op = index;
    op.touched[j] = &t;
    auto* h = static_cast<device::StorageHandle*>(p.storage->data_ptr().get_context());
    if (h->deferred() == device::StorageHandle::Deferred::kNone) {
      h->set_deferred(device::StorageHandle::Deferred::kRead);
    }
  }
  const int filled = op.whole_fill ? op.args[0].param : -1;
  for (int w : op.writes) {
    Touched& t = *op.touched[static_cast<size_t>(w)];
    c10::StorageImpl* st = t.storage.get();
    if (w == filled && t.first_op == index) {
      Constant& c = r.constants[st];
      c.value = op.fill;
      c.sizes = op.args[0].view.sizes;
      c.dtype = op.args[0].dtype;
      c.landed = false;
    } else if (!r.constants.empty()) {
      r.constants.erase(st);
    }
    t.written = true;
    static_cast<device::StorageHandle*>(t.storage->data_ptr().get_context())
        ->set_deferred(device::StorageHandle::Deferred::kWritten);
  }
  r.skeleton = fnv(r.skeleton, reinterpret_cast<uintptr_t>(op.plan));
  r.size++;
}

// A loop's region holds at least this many ops: a short body (x = x * a + b) runs several
// iterations per program rather than one program per iteration.
constexpr size_t kLoopMinOps = 64;
// Candidate periods followed at once (each costs one comparison per recorded op).
constexpr size_t kMaxPeriods = 32;

// Whether the region, its last op just appended, is whole iterations of a loop and runs now.
// Only the op stream decides (which plans, in which order), never timing, so every rank running
// the same code cuts the same programs. A period L is a candidate from the first op after the
// start that repeats the region's first op, and stays one while each op repeats the op L before
// it; the region is cut once it holds max(2L, kLoopMinOps rounded up to L) ops of it, and that
// (skeleton, size) is remembered, so the next iterations are cut at the same length at once.
bool loop_cut(Region& r) {
  if (r.loops.count(fnv(r.skeleton, r.size))) return true;
  const size_t p = r.size - 1;
  const OpPlan* plan = r.ops[p].plan;
  size_t kept = 0;
  bool cut = false;
  for (size_t period : r.periods) {
    if (r.ops[p - period].plan != plan) continue;
    r.periods[kept++] = period;
    const size_t length = std::max(2 * period, (kLoopMinOps + period - 1) / period * period);
    cut = cut || r.size == length;
  }
  r.periods.resize(kept);
  if (cut) {
    r.loops.insert(fnv(r.skeleton, r.size));
    return true;
  }
  if (p > 0 && plan == r.ops[0].plan && r.periods.size() < kMaxPeriods) r.periods.push_back(p);
  return false;
}

// Whether the call is fill_(value) or zero_() over every byte of its tensor's storage.
void fill_of(const OpPlan& plan, const torch::jit::Stack& stack, size_t first, RecordedOp& op) {
  const bool zero = plan.called_name == "aten::zero_";
  if (!zero && plan.called_name != "aten::fill_.Scalar") return;
  if (op.args.empty() || op.args[0].kind != ArgDesc::Kind::kTensor) return;
  const at::Tensor& t = stack[first].toTensor();
  if (!t.is_contiguous() || t.storage_offset() != 0 ||
      t.numel() * static_cast<int64_t>(t.element_size()) !=
          static_cast<int64_t>(t.storage().nbytes())) {
    return;
  }
  op.whole_fill = true;
  op.fill = zero ? c10::Scalar(0) : stack[first + 1].toScalar();
}

// The call's results on the stack, as a launch leaves them (executor.cpp's launch).
void push_results(const OpPlan& plan, const OpEntry& e, std::vector<at::Tensor>& fresh,
                  torch::jit::Stack* stack, size_t first) {
  if (plan.variant != Variant::kFunctional) {
    std::vector<c10::IValue> written;
    for (size_t i = 0; i < plan.mutated_args.size() && i < plan.called_returns; ++i) {
      written.push_back((*stack)[first + plan.mutated_args[i]]);
    }
    stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
    for (auto& v : written) stack->push_back(std::move(v));
    return;
  }
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  if (e.return_lists.empty()) {
    for (auto& t : fresh) stack->emplace_back(std::move(t));
    return;
  }
  size_t next = 0;
  for (int n : e.return_lists) {
    if (n < 0) {
      stack->emplace_back(std::move(fresh[next++]));
      continue;
    }
    c10::List<at::Tensor> list;
    for (int k = 0; k < n; ++k) list.push_back(std::move(fresh[next++]));
    stack->emplace_back(std::move(list));
  }
}

}  // namespace

const char* cause_name(Cause c) {
  switch (c) {
    case Cause::kMaterialization:
      return "materialization";
    case Cause::kUnsupported:
      return "unsupported_op";
    case Cause::kCollective:
      return "collective";
    case Cause::kSync:
      return "sync";
    case Cause::kSize:
      return "size";
    case Cause::kLoop:
      return "loop";
    case Cause::kGraph:
      return "graph_or_access";
    case Cause::kCount:
      return "churn_fallback";
  }
  return "?";
}

bool enabled() { return on.load(std::memory_order_relaxed); }

void set_enabled(bool value) {
  if (!value && on.load()) {
    on.store(false);
    for (int d = 0; d < kMaxDevices; ++d) flush(d, Cause::kSync);
    return;
  }
  on.store(value);
}

InsideRegion::InsideRegion(int device) : previous_(inside) { inside = device; }
InsideRegion::~InsideRegion() { inside = previous_; }

CauseScope::CauseScope(Cause cause) : previous_(access_cause) { access_cause = cause; }
CauseScope::~CauseScope() { access_cause = previous_; }

StrictScope::StrictScope() : previous_(strict_here) { strict_here = true; }
StrictScope::~StrictScope() { strict_here = previous_; }

void set_location_hooks(CaptureLocation capture, DescribeLocation describe) {
  capture_hook.store(capture);
  describe_hook.store(describe);
}

std::string describe_location(int64_t id) {
  DescribeLocation f = describe_hook.load();
  return id >= 0 && f ? f(id) : std::string();
}

void count_program() { counters().programs++; }
void count_replayed(int64_t ops) { counters().replayed += ops; }
void count_flush(Cause cause, bool churn) {
  counters().flushes[static_cast<size_t>(churn ? Cause::kCount : cause)]++;
}

Stats stats() {
  Stats s;
  s.programs = counters().programs.load();
  s.ops = counters().ops.load();
  s.replayed_ops = counters().replayed.load();
  for (size_t i = 0; i < s.flushes.size(); ++i) s.flushes[i] = counters().flushes[i].load();
  return s;
}

void reset_stats() {
  counters().programs = 0;
  counters().ops = 0;
  counters().replayed = 0;
  for (auto& f : counters().flushes) f = 0;
}

void flush(int device, Cause cause) {
  if (device < 0) {
    uint64_t mask = recorded_on;
    const int current = device::current_device();
    if (current >= 0 && current < kMaxDevices) mask |= uint64_t{1} << current;
    for (int d = 0; d < kMaxDevices; ++d) {
      if (mask & (uint64_t{1} << d)) flush(d, cause);
    }
    return;
  }
  if (device >= kMaxDevices) return;
  recorded_on &= ~(uint64_t{1} << device);
  DeviceRegion& d = region_of(device);
  std::lock_guard<std::mutex> g(d.mutex);
  if (d.region.empty()) return;
  InsideRegion in(device);
  run_region(d.region, device, cause);
}

Recorded record(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                std::string* reason) {
  // TPU_LAUNCH_BLOCKING=1 asks for every error at its op: each op runs as strict eager's.
  if (strict_here || runtime::launch_blocking()) return Recorded::kEager;
  const auto& schema = op.schema();
  const size_t first = stack->size() - schema.arguments().size();
  if (plan.called_name == "torchtpu::stablehlo_call") {
    // A user's module is compiled at the call, so that its errors come there (executor.cpp).
    flush(-1, Cause::kUnsupported);
    return Recorded::kEager;
  }
  CaptureLocation capture = capture_hook.load(std::memory_order_relaxed);
  const int64_t location = capture ? capture() : -1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    InsideRegion scanning(-1);
    PooledCallState pooled;
    CallState& state = *pooled;
    const OpPlan* plan_ptr = &plan;
    state.key.append(reinterpret_cast<const char*>(&plan_ptr), sizeof(plan_ptr));
    Scanner(state, /*with_views=*/true).scan(schema, *stack, first);
    const int device = state.device >= 0 ? state.device : device::current_device();
    bool hit = false;
    std::shared_ptr<OpEntry> entry = descriptions().get_or_build(
        state.key, [&] { return describe_native(plan, op, stack, state, attempt); }, &hit);
    if (!entry) continue;  // out= arguments changed shape: so did the signature
    if (entry->fallback) {
      *reason = *entry->fallback;
      flush(device, Cause::kUnsupported);
      return Recorded::kFallback;
    }
    std::vector<at::Tensor> fresh;
    DeviceRegion& d = region_of(device);
    {
      std::lock_guard<std::mutex> g(d.mutex);
      InsideRegion in(device);
      if (d.region.size >= max_ops()) run_region(d.region, device, Cause::kSize);
      // torch.use_deterministic_algorithms / set_float32_matmul_precision changed since the
      // region's first op: its program is built under one setting, so the ops before run now.
      if (!d.region.empty() && d.region.numerics != state.numerics) {
        run_region(d.region, device, Cause::kSync);
      }
      if (d.region.empty()) d.region.numerics = state.numerics;
      RecordedOp& rec = d.region.next();
      rec.plan = &plan;
      rec.entry = entry;
      rec.key = state.key;
      rec.location = location;
      rec.params.assign(state.params.begin(), state.params.end());
      rec.num_scanned = state.params.size();
      rec.num_args = state.args.size();
      rec.args.assign(state.args.begin(), state.args.end());
      rec.values.resize(rec.num_args);
      for (size_t i = 0; i < rec.num_args; ++i) {
        const ArgDesc::Kind k = rec.args[i].kind;
        rec.values[i] = k == ArgDesc::Kind::kTensor || k == ArgDesc::Kind::kTensorList
                            ? c10::IValue()
                            : (*stack)[first + i];
      }
      // A CPU scalar's value is the call's: the caller may change the tensor before the region
      // runs.
      for (Param& p : rec.params) {
        if (p.kind == Param::Kind::kCpuTensor) p.cpu_tensor = p.cpu_tensor.clone();
      }
      if (plan.variant != Variant::kFunctional) {
        for (size_t m : plan.mutated_args) mark_written(rec.args[m], rec);
      }
      fill_of(plan, *stack, first, rec);
      make_outputs(*entry, device, rec, fresh);
      // Drawn in the order the calls reach the device, as strict launches draw.
      draw(*entry, device, *stack, rec);
      append(d.region);
      if (loop_cut(d.region)) run_region(d.region, device, Cause::kLoop);
    }
    recorded_on |= uint64_t{1} << device;
    counters().ops++;
    push_results(plan, *entry, fresh, stack, first);
    return Recorded::kRecorded;
  }
  TORCH_CHECK(false, "torchtpu: ", plan.called_name, ": out= arguments keep changing shape");
}

}  // namespace torchtpu::exec::fused
