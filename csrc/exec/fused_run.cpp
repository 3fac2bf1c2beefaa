// Running a fused eager region (exec/fused_region.h): its ops assemble into one call of one
// program (parameters: every storage once, then the ops' runtime values), looked up by a key
// made of the ops' own signature keys, which storages they share, and which of the storages
// they write are still readable afterwards. A miss builds the ops as a many-node ProgramSpec
// with the engine's build (exec/program.h) and compiles it off the critical path. A region whose
// programs keep missing the cache (a sequence length that grows every step) runs op by op
// instead, each op its own program, cached by its own signature, as strict eager does.
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "config/config.h"
#include "device/storage.h"
#include "exec/fused_region.h"
#include "exec/program.h"
#include "lowering/lowering.h"
#include "runtime/compile.h"
#include "runtime/device_checks.h"
#include "runtime/metrics.h"
#include "runtime/program_cache.h"
#include "runtime/runtime.h"
#include "runtime/signature.h"

namespace torchtpu::exec::fused {
namespace {

template <typename T>
T& slot_of(std::vector<T>& v, size_t at) {
  if (at == v.size()) v.emplace_back();
  return v[at];
}

using Deferred = device::StorageHandle::Deferred;

// A range of a region's ops as one program's call. Kept from call to call on each thread
// (run_region's are thread_local), so that a steady loop assembles without allocating.
struct Assembly {
  CallState state;                            // parameters (and, to build, arguments)
  std::vector<int> map;                       // op k's params at map[map_begin[k] ...]
  std::vector<size_t> map_begin;              // per op of the range
  std::vector<c10::StorageImpl*> storage_of;  // per parameter, null when not a storage
  std::vector<const Touched*> touched_of;     // per parameter, null when not a storage
  std::vector<bool> discard;                  // per parameter: written, then read by nobody
  std::vector<bool> written;
  std::string key;
  size_t begin = 0;
  const int* params_of(size_t op) const { return map.data() + map_begin[op - begin]; }
};

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), 8); }
void put(std::string& key, char c) { key.push_back(c); }

device::StorageHandle* handle(c10::StorageImpl* st) {
  return static_cast<device::StorageHandle*>(st->data_ptr().get_context());
}

uint64_t next_epoch() {
  static std::atomic<uint64_t> epoch{0};
  return ++epoch;
}

void assemble(const Region& r, size_t begin, size_t end, int device, Assembly& a) {
  const uint64_t epoch = next_epoch();
  a.begin = begin;
  a.state.device = device;
  a.key.clear();
  a.map.clear();
  a.map_begin.clear();
  a.storage_of.clear();
  a.touched_of.clear();
  a.written.clear();
  std::vector<Param>& params = a.state.params;
  size_t n = 0;
  for (size_t i = begin; i < end; ++i) {
    const RecordedOp& op = r.ops[i];
    put(a.key, static_cast<int64_t>(op.key.size()));
    a.key += op.key;
    a.map_begin.push_back(a.map.size());
    for (size_t j = 0; j < op.params.size(); ++j) {
      const Param& p = op.params[j];
      Touched* t = op.touched[j];
      if (p.kind != Param::Kind::kStorage) {
        a.map.push_back(static_cast<int>(n));
        if (n == params.size()) params.emplace_back();
        params[n++] = p;
        a.storage_of.push_back(nullptr);
        a.touched_of.push_back(nullptr);
        a.written.push_back(false);
        continue;
      }
      if (t->epoch == epoch) {
        a.map.push_back(t->param);
        put(a.key, 'S');
        put(a.key, static_cast<int64_t>(t->param));
        continue;
      }
      t->epoch = epoch;
      t->param = static_cast<int>(n);
      a.map.push_back(t->param);
      if (n == params.size()) params.emplace_back();
      Param& q = params[n++];
      q.kind = Param::Kind::kStorage;
      q.storage = p.storage;
      if (t->born_by == static_cast<int>(i) && j >= op.num_scanned) {
        // A new tensor of this op: the node's result is its first contents.
        q.buffer.reset();
        q.dims = p.dims;
        q.dtype = p.dtype;
        put(a.key, 'B');
      } else if (op.whole_fill && static_cast<int>(j) == op.args[0].param &&
                 t->first_op == static_cast<int>(i)) {
        // Filled whole by the region's first op on it: its old contents are never read (and
        // may be gone: a constant's uploaded buffer that a compiled graph donated, see
        // fused_eager.cpp read_constant).
        q.buffer.reset();
        q.dims = p.dims;
        q.dtype = p.dtype;
        put(a.key, 'F');
      } else {
        // Its contents now: outside writes ran the region first (the storage is deferred), so
        // this is what the region's first reader saw.
        handle(p.storage)->snapshot(&q.buffer, &q.dims, &q.dtype);
        if (!q.buffer) {
          q.dims = p.dims;  // never written: sized as the call's scan saw it
          q.dtype = p.dtype;
        }
        put(a.key, 'E');
        put(a.key, static_cast<char>(q.buffer ? 1 : 0));
        put(a.key, static_cast<int64_t>(q.dims.size()));
        for (int64_t d : q.dims) put(a.key, d);
        put(a.key, static_cast<int64_t>(q.dtype));
      }
      a.storage_of.push_back(p.storage);
      a.touched_of.push_back(t);
      a.written.push_back(false);
    }
    const int* map = a.params_of(i);
    for (int w : op.writes) a.written[static_cast<size_t>(map[w])] = true;
  }
  params.resize(n);
  // Which written storages stay readable decides the program's outputs: part of its key.
  a.discard.assign(n, false);
  for (size_t k = 0; k < n; ++k) {
    if (!a.written[k]) continue;
    const Touched& t = *a.touched_of[k];
    const bool needed = t.storage.use_count() > 1 || t.last_op >= static_cast<int>(end);
    a.discard[k] = !needed;
    put(a.key, static_cast<char>(needed ? 'L' : 'D'));
  }
}

ArgDesc renumber(const ArgDesc& d, const int* map) {
  ArgDesc out = d;
  if (d.param >= 0) out.param = map[d.param];
  if (d.offset_param >= 0) out.offset_param = map[d.offset_param];
  for (size_t k = 0; k < d.items.size(); ++k) out.items[k] = renumber(d.items[k], map);
  return out;
}

// The call's value a lowering sees for argument `j` (LArg::ivalue): a tensor's layout as a meta
// tensor (the call's tensor itself is not kept), a CPU scalar's copy, anything else as called.
c10::IValue value_of(const RecordedOp& op, size_t j) {
  const ArgDesc& d = op.args[j];
  if (d.kind != ArgDesc::Kind::kTensor) return op.values[j];
  const Param& p = op.params[static_cast<size_t>(d.param)];
  if (p.kind == Param::Kind::kCpuTensor) return p.cpu_tensor;
  return at::empty_strided(d.view.sizes, d.view.strides,
                           at::TensorOptions().dtype(d.dtype).device(c10::kMeta));
}

ProgramSpec spec_of(const Region& r, size_t begin, size_t end, Assembly& a) {
  ProgramSpec spec;
  spec.name = "fused eager program";
  a.state.numerics = r.numerics;  // a region's ops share them (fused_eager.cpp cuts where not)
  size_t total = 0;
  for (size_t i = begin; i < end; ++i) total += r.ops[i].args.size();
  a.state.args.clear();
  a.state.args.reserve(total);  // nodes point into it
  std::vector<size_t> base;
  for (size_t i = begin; i < end; ++i) {
    base.push_back(a.state.args.size());
    for (const ArgDesc& d : r.ops[i].args) {
      a.state.args.push_back(renumber(d, a.params_of(i)));
    }
  }
  for (size_t i = begin; i < end; ++i) {
    const RecordedOp& op = r.ops[i];
    const OpPlan& plan = *op.plan;
    const size_t b = base[i - begin];
    Node node;
    node.name = plan.lowering_name;
    node.schema = &plan.lowered_op->schema();
    node.lowering = plan.lowering;
    node.descriptor = plan.descriptor;
    node.out_types = op.entry->out_types;
    for (size_t j : plan.arg_map) {
      node.args.push_back({NodeArg::Kind::kInput, static_cast<int>(b + j), 0, {}, value_of(op, j)});
    }
    if (plan.variant == Variant::kFunctional) {
      for (size_t k = 0; k < op.args.size() - op.num_args; ++k) {
        node.writes.emplace_back(&a.state.args[b + op.num_args + k], static_cast<int>(k));
      }
    } else {
      int k = 0;
      for (size_t m : plan.mutated_args) {
        const ArgDesc& d = a.state.args[b + m];
        if (d.kind != ArgDesc::Kind::kTensorList) node.writes.emplace_back(&d, k++);
        for (const ArgDesc& item : d.items) node.writes.emplace_back(&item, k++);
      }
    }
    if (op.rng_param >= 0) {
      node.rng_param = a.params_of(i)[op.rng_param];
    }
    spec.nodes.push_back(std::move(node));
  }
  spec.discard = a.discard;
  return spec;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

// "aten::mm.default x2, aten::add.Tensor, ..." (runs of one op folded), for log lines.
std::string op_list(const Region& r, size_t begin, size_t end) {
  std::string s;
  constexpr int kMaxRuns = 48;
  int runs = 0;
  for (size_t i = begin; i < end;) {
    size_t j = i + 1;
    while (j < end && r.ops[j].plan == r.ops[i].plan) ++j;
    if (runs++ == kMaxRuns) {
      s += ", ... (" + std::to_string(end - i) + " more)";
      break;
    }
    s += (s.empty() ? "" : ", ") + r.ops[i].plan->called_name;
    if (j - i > 1) s += " x" + std::to_string(j - i);
    i = j;
  }
  return s;
}

std::string tensor_text(const ArgDesc& d) {
  std::string s = c10::toString(d.dtype);
  s += "[";
  for (size_t k = 0; k < d.view.sizes.size(); ++k) {
    s += (k ? ", " : "") + std::to_string(d.view.sizes[k]);
  }
  return s + "]";
}

// The ops [begin, end) by name and tensor types, hashed: what every process running the same
// code launches alike (the assembly key holds plan addresses, which differ across processes).
std::string portable_text(const Region& r, size_t begin, size_t end) {
  uint64_t h = kSkeletonSeed;
  const auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  for (size_t i = begin; i < end; ++i) {
    const RecordedOp& op = r.ops[i];
    mix(op.plan->called_name);
    for (size_t j = 0; j < op.num_args; ++j) {
      if (op.args[j].kind == ArgDesc::Kind::kTensor) mix(tensor_text(op.args[j]));
    }
    mix(";");
  }
  return std::to_string(end - begin) + " ops " + hex(h);
}

// The region's typed signature (its ops, each with its tensors' types), for miss explanations.
runtime::Signature signature_of(const Region& r, size_t begin, size_t end, uint64_t family) {
  runtime::Signature sig;
  sig.op = "fused " + hex(family);
  sig.display = "fused eager program";
  sig.platform = runtime::get().platform();
  for (size_t i = begin; i < end; ++i) {
    const RecordedOp& op = r.ops[i];
    runtime::SigEntry e;
    e.kind = runtime::SigEntry::Kind::kConst;
    e.name = "op" + std::to_string(i - begin);
    e.value = op.plan->called_name + "(";
    bool any = false;
    for (size_t j = 0; j < op.num_args; ++j) {
      const ArgDesc& d = op.args[j];
      if (d.kind != ArgDesc::Kind::kTensor) continue;
      e.value += (any ? ", " : "") + tensor_text(d);
      any = true;
    }
    e.value += ")";
    sig.args.push_back(std::move(e));
  }
  return sig;
}

// The fused programs (and the one-op programs of churning regions), by assembly key.
runtime::ProgramCache<ProgramEntry>& programs() {
  static auto* c = new runtime::ProgramCache<ProgramEntry>();
  return *c;
}

runtime::SignatureIndex& signatures() {
  static auto* s = new runtime::SignatureIndex();
  return *s;
}

// Distinct fused programs a region skeleton (its ops regardless of shapes) may compile before
// its further misses run op by op: a decode loop's growing sequence length stops compiling a
// whole program per token after this many.
int churn_limit() {
  static const int n =
      static_cast<int>(config::positive_int("TORCHTPU_FUSED_CHURN_LIMIT", 2, 1 << 20));
  return n;
}

struct Skeleton {
  int built = 0;
  bool churning = false;
};
std::mutex skeletons_mutex;
std::unordered_map<uint64_t, Skeleton>& skeletons() {
  static auto* m = new std::unordered_map<uint64_t, Skeleton>();
  return *m;
}

// Whether a miss of `skeleton` may build a fused program; says once when it may not any more.
bool may_build(uint64_t skeleton, const Region& r) {
  std::lock_guard<std::mutex> g(skeletons_mutex);
  Skeleton& s = skeletons()[skeleton];
  if (s.built < churn_limit()) {
    s.built++;
    return true;
  }
  if (!s.churning) {
    s.churning = true;
    std::string where = r.empty() ? std::string() : describe_location(r.ops[0].location);
    std::fprintf(stderr,
                 "torchtpu: fused eager: a region of %zu ops (%s%s) missed the program cache "
                 "with new shapes after %d fused programs; its new shapes now run op by op, "
                 "each op a cached program as in strict eager\n",
                 r.size, where.empty() ? "" : ("from " + where + ": ").c_str(),
                 op_list(r, 0, std::min<size_t>(r.size, 6)).c_str(), s.built);
  }
  return false;
}

// fail_builds_for_tests: whole-region builds that throw before lowering.
std::atomic<int> injected_failures{0};

std::mutex log_mutex;
bool log_on = false;
std::vector<std::string>& launched() {
  static auto* v = new std::vector<std::string>();
  return *v;
}

// The program of ops [begin, end): cached, or built now. Null when the region must run op by op
// (`allow_churn` false: the skeleton is churning) or its module would not build.
std::shared_ptr<ProgramEntry> program_for(const Region& r, size_t begin, size_t end, Assembly& a,
                                          bool whole) {
  bool hit = false;
  const auto make = [&]() -> std::shared_ptr<ProgramEntry> {
    if (whole && !may_build(r.skeleton, r)) return nullptr;
    ProgramSpec spec = spec_of(r, begin, end, a);
    auto e = std::make_shared<ProgramEntry>();
    std::string text;
    try {
      if (whole && injected_failures.load() > 0 && injected_failures.fetch_sub(1) > 0) {
        throw std::runtime_error("a build failure injected by a test");
      }
      text = exec::build(spec, a.state, *e);
    } catch (const std::exception& err) {
      // Every op lowered alone when it was recorded; should the whole not, it runs op by op.
      if (!whole) throw;
      std::string where = describe_location(r.ops[begin].location);
      std::fprintf(stderr,
                   "torchtpu: fused eager: a region of %zu ops [%s]%s did not lower as one "
                   "program (%s); it runs op by op\n",
                   end - begin, op_list(r, begin, std::min(end, begin + 6)).c_str(),
                   where.empty() ? "" : (" from " + where).c_str(), err.what());
      return nullptr;
    }
    const uint64_t family = whole ? r.skeleton : reinterpret_cast<uintptr_t>(r.ops[begin].plan);
    auto sig = std::make_shared<runtime::Signature>(signature_of(r, begin, end, family));
    std::string why = signatures().explain_miss(sig->op, *sig);
    std::string where = describe_location(r.ops[begin].location);
    std::string name = whole ? "fused eager program of " + std::to_string(end - begin) + " ops [" +
                                   op_list(r, begin, end) + "]" +
                                   (where.empty() ? "" : " from " + where)
                             : "fused eager op " + r.ops[begin].plan->called_name +
                                   (where.empty() ? "" : " at " + where);
    const size_t num_outputs = e->outputs.size() + (e->checks ? 1 : 0);
    e->program = runtime::compile_program_async(std::move(text), std::move(name), std::move(why),
                                                num_outputs, std::string(), std::string(),
                                                exec::compile_options_of(*e));
    e->signature = sig;
    signatures().add(sig->op, sig);
    runtime::metrics().cache_misses++;
    return e;
  };
  std::shared_ptr<ProgramEntry> e = programs().get_or_build(a.key, make, &hit);
  if (hit) runtime::metrics().cache_hits++;
  if (e && hit && e->program->failed()) {
    // Its compile failed (the error went to the reads of its results): build it again.
    programs().erase(a.key, e);
    e = programs().get_or_build(a.key, make, &hit);
  }
  return e;
}

// Device-side checks named by the op that made each and where it was called.
runtime::CheckSpecs located_checks(const ProgramEntry& e, const Region& r, size_t begin) {
  auto specs = std::make_shared<std::vector<runtime::CheckSpec>>(*e.checks);
  for (size_t k = 0; k < specs->size() && k < e.check_nodes.size(); ++k) {
    const RecordedOp& op = r.ops[begin + static_cast<size_t>(e.check_nodes[k])];
    std::string where = describe_location(op.location);
    (*specs)[k].op += where.empty() ? " (recorded by fused eager)"
                                    : " called at " + where + " (recorded by fused eager)";
  }
  return specs;
}

void launch_and_land(const ProgramEntry& e, const Region& r, size_t begin, size_t end, Assembly& a,
                     int device) {
  std::vector<device::BufferPtr> outputs =
      launch_program(*e.program, e.used_params, a.state, torch::jit::Stack(), 0, device);
  if (e.checks)
    runtime::defer_checks(device, std::move(outputs.back()), located_checks(e, r, begin));
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    const OutputSink& o = e.outputs[k];
    TORCH_INTERNAL_ASSERT(o.to_storage, "torchtpu: a fused program returns a new tensor");
    handle(a.storage_of[static_cast<size_t>(o.index)])
        ->set_buffer(std::move(outputs[k]), o.dims, o.element_type);
  }
  if (log_on) {
    std::lock_guard<std::mutex> g(log_mutex);
    if (log_on) {
      launched().push_back("tpu:" + std::to_string(device) + " " + portable_text(r, begin, end));
    }
  }
}

}  // namespace

RecordedOp& Region::next() {
  RecordedOp& op = slot_of(ops, size);
  op.writes.clear();
  op.rng_param = -1;
  op.location = -1;
  op.whole_fill = false;
  return op;
}

void Region::clear() {
  for (auto& [st, t] : storages) handle(st)->set_deferred(Deferred::kNone);
  // Drops the region's references: temporaries nobody else holds are freed here.
  storages.clear();
  constants.clear();
  for (size_t i = 0; i < size; ++i) ops[i].entry.reset();
  size = 0;
  skeleton = kSkeletonSeed;
  periods.clear();
}

void run_region(Region& r, int device, Cause cause) {
  thread_local Assembly whole, one;
  const size_t n = r.size;
  bool churn = false;
  try {
    assemble(r, 0, n, device, whole);
    std::shared_ptr<ProgramEntry> e = program_for(r, 0, n, whole, /*whole=*/true);
    if (e) {
      launch_and_land(*e, r, 0, n, whole, device);
      count_program();
    } else {
      churn = true;
      for (size_t i = 0; i < n; ++i) {
        assemble(r, i, i + 1, device, one);
        std::shared_ptr<ProgramEntry> pe = program_for(r, i, i + 1, one, /*whole=*/false);
        launch_and_land(*pe, r, i, i + 1, one, device);
      }
      count_replayed(static_cast<int64_t>(n));
    }
  } catch (...) {
    r.clear();
    throw;
  }
  count_flush(cause, churn);
  r.clear();
}

void fail_builds_for_tests(int n) { injected_failures.store(n); }

void set_launch_log(bool on) {
  std::lock_guard<std::mutex> g(log_mutex);
  log_on = on;
  launched().clear();
}

std::vector<std::string> launch_log() {
  std::lock_guard<std::mutex> g(log_mutex);
  return launched();
}

}  // namespace torchtpu::exec::fused
