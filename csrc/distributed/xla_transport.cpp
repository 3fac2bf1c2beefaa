#include "distributed/xla_transport.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <Python.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <sstream>

#include "config/config.h"
#include "device/current_device.h"
#include "device/storage.h"
#include "distributed/xla_work.h"
#include "exec/call_state.h"
#include "exec/fused_eager.h"
#include "exec/host_transfer.h"
#include "exec/program.h"
#include "lowering/lowering.h"
#include "pjrt/pjrt.h"
#include "pjrt/world.h"
#include "runtime/compile.h"
#include "runtime/metrics.h"
#include "runtime/program_cache.h"
#include "runtime/runtime.h"

namespace torchtpu::distributed {
namespace {

using exec::NodeArg;
using lowering::TensorType;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return "[" + s + "]";
}

// The ranks of an in-process world meet on the host before launching; a rank's thread must not
// hold the GIL there, or the others could never reach the meeting. Calls from Python usually
// arrive without it (process group methods release it); torch.ops calls may not.
class WithoutGil {
 public:
  WithoutGil() {
    if (Py_IsInitialized() && PyGILState_Check()) state_ = PyEval_SaveThread();
  }
  ~WithoutGil() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

// A tensor is "plain" when it is its storage, contiguous from offset 0: its program reads and
// writes it without the view's structure, which another rank's tensor may not share.
bool plain(const at::Tensor& t) {
  return t.is_contiguous() && t.storage_offset() == 0 &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

// c10d's reduce ops as _c10d_functional names them (PREMUL_SUM: a product, then "sum").
std::string reduce_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return "sum";
    case c10d::ReduceOp::AVG:
      return "avg";
    case c10d::ReduceOp::PRODUCT:
      return "product";
    case c10d::ReduceOp::MIN:
      return "min";
    case c10d::ReduceOp::MAX:
      return "max";
    case c10d::ReduceOp::BAND:
      return "band";
    case c10d::ReduceOp::BOR:
      return "bor";
    case c10d::ReduceOp::BXOR:
      return "bxor";
    default:
      TORCH_CHECK(false, "torchtpu: reduce op ", static_cast<int>(op.op_),
                  " is not supported by the tpu backend");
  }
}

TensorType type_of(c10::ScalarType dtype, std::vector<int64_t> sizes) {
  return TensorType(lowering::to_element_type(dtype), std::move(sizes));
}

// The process-wide cache of collective programs: the ranks of a world look up the same entries
// (the key names the world's devices), so they launch one executable.
runtime::ProgramCache<exec::ProgramEntry>& program_cache() {
  static auto* cache = new runtime::ProgramCache<exec::ProgramEntry>();
  return *cache;
}

// One collective program, described as a small graph over the call's tensors (its slots): the
// nodes come from the lowering table, the results are written into slots. `describe_` spells
// the structure for the cache key; the slots' types and views come from the engine's scan.
class CollectiveProgram {
 public:
  CollectiveProgram(std::string what, std::shared_ptr<const runtime::ReplicaWorld> world,
                    std::chrono::milliseconds timeout)
      : what_(std::move(what)), world_(std::move(world)), timeout_(timeout) {}

  NodeArg slot(const at::Tensor& t, bool read = true) {
    slots_.push_back(t);
    read_.push_back(read);
    describe_ += "s" + std::string(read ? "r" : "w") + ";";
    return NodeArg{NodeArg::Kind::kInput, static_cast<int>(slots_.size()) - 1, 0, {}, {}};
  }
  // A Python number read as a runtime value (a 0-d CPU tensor slot), so changing it never
  // recompiles.
  NodeArg scalar(double value) {
    slots_.push_back(at::scalar_tensor(value, at::kDouble));
    read_.push_back(true);
    describe_ += "n;";
    return NodeArg{NodeArg::Kind::kScalarInput,
                   static_cast<int>(slots_.size()) - 1,
                   0,
                   {},
                   c10::IValue(c10::Scalar(value))};
  }
  static NodeArg constant(c10::IValue v) {
    return NodeArg{NodeArg::Kind::kConst, 0, 0, {}, std::move(v)};
  }
  static NodeArg list(std::vector<NodeArg> items) {
    return NodeArg{NodeArg::Kind::kList, 0, 0, std::move(items), {}};
  }
  // Adds a node; returns its `output`-th result.
  NodeArg node(const char* op, const char* overload, std::vector<NodeArg> args,
               std::vector<TensorType> out_types, int output = 0) {
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
    exec::Node n;
    n.name = std::string(op) + (*overload ? std::string(".") + overload : std::string());
    n.schema = &handle.schema();
    n.descriptor = lowering::find_op(n.name);
    TORCH_INTERNAL_ASSERT(n.descriptor != nullptr, "torchtpu: no lowering for ", n.name);
    n.lowering = &n.descriptor->fn;
    describe_ += "n" + n.name + "(";
    for (const NodeArg& a : args) describe_ += describe(a) + ",";
    describe_ += ")->";
    for (const TensorType& t : out_types) describe_ += t.str() + ",";
    describe_ += ";";
    n.out_types = std::move(out_types);
    n.args = std::move(args);
    spec_.nodes.push_back(std::move(n));
    return result(static_cast<int>(spec_.nodes.size()) - 1, output);
  }
  static NodeArg result(int node, int output) {
    return NodeArg{NodeArg::Kind::kNode, node, output, {}, {}};
  }
  void write(const NodeArg& slot, NodeArg value) {
    describe_ += "w" + std::to_string(slot.index) + "=" + describe(value) + ";";
    writes_.emplace_back(slot.index, std::move(value));
  }

  // Compiles (once per structure and world) and launches the program on this rank; returns the
  // Work over the written tensors. When the ranks' programs differ only because their tensors'
  // views do, runs again on plain copies of them.
  c10::intrusive_ptr<c10d::Work> run(int rank, c10d::OpType type) {
    WithoutGil no_gil;
    // Like NCCL or gloo writing into the output's memory, a collective's writes (and the copies
    // below) are not autograd-visible mutations: version counters stay (selective activation
    // checkpointing checks them on cached collective outputs).
    at::AutoDispatchBelowADInplaceOrView collective_write;
    for (size_t i = 0; i < slots_.size(); ++i) {
      // A never-written storage would fold into the program as zeros, and another rank's
      // written one would not: give it its (zero) contents.
      if (read_[i] && slots_[i].is_privateuseone() && !device::handle_of(slots_[i])->buffer()) {
        slots_[i].zero_();
      }
    }
    try {
      return launch(rank, type, slots_);
    } catch (const runtime::CollectiveMismatch& e) {
      bool all_plain = true;
      for (const at::Tensor& t : slots_)
        all_plain = all_plain && (!t.is_privateuseone() || plain(t));
      TORCH_CHECK(!all_plain, e.what());
    }
    // Every rank got the mismatch, so every rank is here: plain copies agree wherever the
    // tensors' shapes and dtypes do.
    std::vector<at::Tensor> copies;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const at::Tensor& t = slots_[i];
      if (!t.is_privateuseone() || plain(t)) {
        copies.push_back(t);
        continue;
      }
      at::Tensor c = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
      if (read_[i]) c.copy_(t);
      copies.push_back(c);
    }
    try {
      launch(rank, type, copies);
    } catch (const runtime::CollectiveMismatch& e) {
      TORCH_CHECK(false, e.what());
    }
    for (const auto& [index, value] : writes_) {
      const at::Tensor& target = slots_[static_cast<size_t>(index)];
      const at::Tensor& copy = copies[static_cast<size_t>(index)];
      if (!target.is_same(copy)) target.copy_(copy);
    }
    return work_over(rank, type, slots_);
  }

 private:
  static std::string describe(const NodeArg& a) {
    switch (a.kind) {
      case NodeArg::Kind::kInput:
        return "s" + std::to_string(a.index);
      case NodeArg::Kind::kScalarInput:
        return "n" + std::to_string(a.index);
      case NodeArg::Kind::kNode:
        return "r" + std::to_string(a.index) + "." + std::to_string(a.output);
      case NodeArg::Kind::kList: {
        std::string s = "[";
        for (const NodeArg& i : a.items) s += describe(i) + ",";
        return s + "]";
      }
      case NodeArg::Kind::kConst: {
        std::ostringstream os;
        os << a.constant;
        return "c" + os.str();
      }
      case NodeArg::Kind::kNone:
        return "none";
    }
    return "?";
  }

  c10::intrusive_ptr<c10d::Work> launch(int rank, c10d::OpType type,
                                        const std::vector<at::Tensor>& slots) {
    // Fused eager: a collective ends the rank's pending region, at the same op on every rank.
    if (exec::fused::enabled()) exec::fused::flush(-1, exec::fused::Cause::kCollective);
    exec::CallState state;
    state.args.resize(slots.size());
    exec::Scanner scanner(state);
    for (size_t i = 0; i < slots.size(); ++i) scanner.tensor(slots[i], state.args[i]);
    const std::string key = describe_ + "|" + state.key + "|on " + join(world_->devices);
    bool hit = false;
    std::shared_ptr<exec::ProgramEntry> entry = program_cache().get_or_build(
        key,
        [&] {
          exec::ProgramSpec spec = spec_;
          spec.name = what_;
          spec.world = world_;
          for (const auto& [index, value] : writes_) {
            spec.writes.emplace_back(&state.args[static_cast<size_t>(index)], value);
          }
          auto e = std::make_shared<exec::ProgramEntry>();
          std::string text = exec::build(spec, state, *e);
          const std::string signature =
              what_ + " over devices " + join(world_->devices) + " " + describe_slots(slots);
          e->program =
              runtime::compile_program(text, signature, "first use", exec::compile_options_of(*e));
          return e;
        },
        &hit);
    if (hit) runtime::metrics().cache_hits++;
    exec::launch(*entry, state, torch::jit::Stack(), {}, 0, world_.get());
    return work_over(rank, type, slots);
  }

  // The Work of the written slots of `slots`, complete when their new buffers are.
  c10::intrusive_ptr<c10d::Work> work_over(int rank, c10d::OpType type,
                                           const std::vector<at::Tensor>& slots) {
    std::vector<at::Tensor> result;
    std::vector<device::BufferPtr> buffers;
    for (const auto& [index, value] : writes_) {
      const at::Tensor& t = slots[static_cast<size_t>(index)];
      result.push_back(t);
      if (device::BufferPtr b = device::handle_of(t)->buffer()) buffers.push_back(std::move(b));
    }
    return c10::make_intrusive<XlaWork>(rank, type, std::move(result), std::move(buffers),
                                        timeout_);
  }

  static std::string describe_slots(const std::vector<at::Tensor>& slots) {
    std::ostringstream os;
    os << "(";
    for (size_t i = 0; i < slots.size(); ++i) {
      os << (i ? ", " : "") << c10::toString(slots[i].scalar_type()) << slots[i].sizes();
    }
    os << ")";
    return os.str();
  }

  std::string what_;
  std::shared_ptr<const runtime::ReplicaWorld> world_;
  std::chrono::milliseconds timeout_;
  std::vector<at::Tensor> slots_;
  std::vector<bool> read_;
  exec::ProgramSpec spec_;
  std::vector<std::pair<int, NodeArg>> writes_;
  std::string describe_;
};

NodeArg reshaped(CollectiveProgram& p, const NodeArg& v, c10::ScalarType dtype,
                 const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from == to) return v;
  return p.node("aten::reshape", "", {v, CollectiveProgram::constant(c10::IValue(to))},
                {type_of(dtype, to)});
}

}  // namespace

XlaTransport::XlaTransport(std::string group_name, runtime::GroupLayout layout, int device_index)
    : name_(std::move(group_name)), layout_(std::move(layout)), device_index_(device_index) {
  auto world = std::make_shared<runtime::ReplicaWorld>();
  world->key = layout_.uid;
  world->devices = layout_.devices;
  world->in_process = layout_.in_process;
  world->timeout = layout_.timeout;
  std::vector<int64_t> all(layout_.devices.size());
  std::iota(all.begin(), all.end(), 0);
  world->groups[name_] = {all};
  world_ = std::move(world);
  runtime::register_group(device_index_, name_, layout_);
}

XlaTransport::~XlaTransport() { runtime::unregister_group(device_index_, name_, layout_.uid); }

std::string XlaTransport::describe() const {
  return "devices " + join(layout_.devices) +
         (layout_.in_process ? " of this process's PJRT client"
                             : " of one multi-process PJRT world");
}

bool XlaTransport::supports(c10::ScalarType dtype, c10d::OpType op) const {
  if (c10::isComplexType(dtype)) {
    // Bit-exact broadcasts and reduce's select have no complex form; sums and data movement do.
    return op != c10d::OpType::BROADCAST && op != c10d::OpType::REDUCE &&
           op != c10d::OpType::SCATTER;
  }
  try {
    lowering::to_element_type(dtype);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

c10::intrusive_ptr<c10d::Work> XlaTransport::allreduce(const std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOp& op) {
  const std::string reduce = reduce_name(op);
  CollectiveProgram p("all_reduce " + reduce, world_, layout_.timeout);
  std::optional<NodeArg> factor;
  if (op == c10d::ReduceOp::PREMUL_SUM) {
    auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "PREMUL_SUM reduce op without its factor");
    if (supplement->tensor_factor.defined()) {
      factor = p.slot(supplement->tensor_factor.to(tensors.at(0).device()));
    } else {
      factor = p.scalar(supplement->double_factor);
    }
  }
  for (const at::Tensor& t : tensors) {
    NodeArg s = p.slot(t);
    NodeArg v = s;
    const TensorType type = type_of(t.scalar_type(), t.sizes().vec());
    if (factor) {
      TORCH_CHECK(at::isFloatingType(t.scalar_type()),
                  "ReduceOp.PREMUL_SUM on the tpu backend needs a floating point tensor, got ",
                  t.scalar_type());
      v = factor->kind == NodeArg::Kind::kScalarInput
              ? p.node("aten::mul", "Scalar", {v, *factor}, {type})
              : p.node("aten::mul", "Tensor", {v, *factor}, {type});
    }
    p.write(s, p.node("_c10d_functional::all_reduce", "",
                      {v, CollectiveProgram::constant(reduce), CollectiveProgram::constant(name_)},
                      {type}));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::broadcast(const std::vector<at::Tensor>& tensors,
                                                       int root) {
  CollectiveProgram p("broadcast from " + std::to_string(root), world_, layout_.timeout);
  for (const at::Tensor& t : tensors) {
    NodeArg s = p.slot(t);
    p.write(s, p.node("_c10d_functional::broadcast", "",
                      {s, CollectiveProgram::constant(int64_t{root}),
                       CollectiveProgram::constant(name_)},
                      {type_of(t.scalar_type(), t.sizes().vec())}));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::BROADCAST);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::reduce(const std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOp& op, int root) {
  TORCH_CHECK(op != c10d::ReduceOp::PREMUL_SUM,
              "torchtpu: reduce with PREMUL_SUM is not supported; use SUM on scaled inputs");
  const std::string reduce = reduce_name(op);
  CollectiveProgram p("reduce " + reduce + " to " + std::to_string(root), world_, layout_.timeout);
  for (const at::Tensor& t : tensors) {
    NodeArg s = p.slot(t);
    p.write(s,
            p.node("torchtpu::c10d_reduce", "",
                   {s, CollectiveProgram::constant(reduce),
                    CollectiveProgram::constant(int64_t{root}), CollectiveProgram::constant(name_)},
                   {type_of(t.scalar_type(), t.sizes().vec())}));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::REDUCE);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::allgather_into(const std::vector<at::Tensor>& outputs,
                                                            const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(outputs.size() == inputs.size(), "all_gather_into_tensor: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  CollectiveProgram p("all_gather_into_tensor", world_, layout_.timeout);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    const at::Tensor& out = outputs[i];
    TORCH_CHECK(out.numel() == in.numel() * k, "all_gather_into_tensor on the tpu backend: the ",
                "output has ", out.numel(), " elements, expected the input's ", in.numel(),
                " times the group size ", k);
    TORCH_CHECK(out.scalar_type() == in.scalar_type(), "all_gather_into_tensor: output dtype ",
                out.scalar_type(), " differs from the input's ", in.scalar_type());
    NodeArg s_in = p.slot(in);
    NodeArg s_out = p.slot(out, /*read=*/false);
    const std::vector<int64_t> row = {1, in.numel()};
    NodeArg x = reshaped(p, s_in, in.scalar_type(), in.sizes().vec(), row);
    NodeArg g = p.node("_c10d_functional::all_gather_into_tensor", "",
                       {x, CollectiveProgram::constant(k), CollectiveProgram::constant(name_)},
                       {type_of(in.scalar_type(), {k, in.numel()})});
    p.write(s_out, reshaped(p, g, in.scalar_type(), {k, in.numel()}, out.sizes().vec()));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::_ALLGATHER_BASE);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::allgather(
    const std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(outputs.size() == inputs.size(), "all_gather: ", outputs.size(), " output lists for ",
              inputs.size(), " inputs");
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  CollectiveProgram p("all_gather", world_, layout_.timeout);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    TORCH_CHECK(static_cast<int64_t>(outputs[i].size()) == k, "all_gather: ", outputs[i].size(),
                " outputs for a group of ", k, " ranks");
    NodeArg x = reshaped(p, p.slot(in), in.scalar_type(), in.sizes().vec(), {1, in.numel()});
    NodeArg g = p.node("_c10d_functional::all_gather_into_tensor", "",
                       {x, CollectiveProgram::constant(k), CollectiveProgram::constant(name_)},
                       {type_of(in.scalar_type(), {k, in.numel()})});
    for (int64_t r = 0; r < k; ++r) {
      const at::Tensor& out = outputs[i][static_cast<size_t>(r)];
      TORCH_CHECK(out.numel() == in.numel() && out.scalar_type() == in.scalar_type(),
                  "all_gather on the tpu backend: output ", r, " (", out.scalar_type(), out.sizes(),
                  ") does not match the input (", in.scalar_type(), in.sizes(), ")");
      NodeArg row =
          p.node("aten::select", "int",
                 {g, CollectiveProgram::constant(int64_t{0}), CollectiveProgram::constant(r)},
                 {type_of(in.scalar_type(), {in.numel()})});
      p.write(p.slot(out, /*read=*/false),
              reshaped(p, row, in.scalar_type(), {in.numel()}, out.sizes().vec()));
    }
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::ALLGATHER);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::reduce_scatter_from(
    const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
    const c10d::ReduceOp& op) {
  TORCH_CHECK(outputs.size() == inputs.size(), "reduce_scatter_tensor: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  const std::string reduce = reduce_name(op);
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  CollectiveProgram p("reduce_scatter_tensor " + reduce, world_, layout_.timeout);
  std::optional<NodeArg> factor;
  if (op == c10d::ReduceOp::PREMUL_SUM) {
    auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "PREMUL_SUM reduce op without its factor");
    factor = supplement->tensor_factor.defined()
                 ? p.slot(supplement->tensor_factor.to(inputs.at(0).device()))
                 : p.scalar(supplement->double_factor);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    const at::Tensor& out = outputs[i];
    TORCH_CHECK(in.numel() == out.numel() * k, "reduce_scatter_tensor on the tpu backend: the ",
                "input has ", in.numel(), " elements, expected the output's ", out.numel(),
                " times the group size ", k);
    TORCH_CHECK(out.scalar_type() == in.scalar_type(), "reduce_scatter_tensor: output dtype ",
                out.scalar_type(), " differs from the input's ", in.scalar_type());
    const std::vector<int64_t> rows = {k, out.numel()};
    NodeArg x = reshaped(p, p.slot(in), in.scalar_type(), in.sizes().vec(), rows);
    if (factor) {
      x = factor->kind == NodeArg::Kind::kScalarInput
              ? p.node("aten::mul", "Scalar", {x, *factor}, {type_of(in.scalar_type(), rows)})
              : p.node("aten::mul", "Tensor", {x, *factor}, {type_of(in.scalar_type(), rows)});
    }
    NodeArg r = p.node("_c10d_functional::reduce_scatter_tensor", "",
                       {x, CollectiveProgram::constant(reduce), CollectiveProgram::constant(k),
                        CollectiveProgram::constant(name_)},
                       {type_of(in.scalar_type(), {1, out.numel()})});
    p.write(p.slot(out, /*read=*/false),
            reshaped(p, r, in.scalar_type(), {1, out.numel()}, out.sizes().vec()));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::reduce_scatter(
    const std::vector<at::Tensor>& outputs, const std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceOp& op) {
  TORCH_CHECK(op != c10d::ReduceOp::PREMUL_SUM,
              "torchtpu: reduce_scatter (list form) with PREMUL_SUM is not supported; use "
              "reduce_scatter_tensor");
  TORCH_CHECK(outputs.size() == inputs.size(), "reduce_scatter: ", outputs.size(), " outputs for ",
              inputs.size(), " input lists");
  const std::string reduce = reduce_name(op);
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  CollectiveProgram p("reduce_scatter " + reduce, world_, layout_.timeout);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    TORCH_CHECK(static_cast<int64_t>(inputs[i].size()) == k, "reduce_scatter: ", inputs[i].size(),
                " inputs for a group of ", k, " ranks");
    std::vector<NodeArg> rows;
    for (const at::Tensor& in : inputs[i]) {
      TORCH_CHECK(in.numel() == out.numel() && in.scalar_type() == out.scalar_type(),
                  "reduce_scatter on the tpu backend: an input (", in.scalar_type(), in.sizes(),
                  ") does not match the output (", out.scalar_type(), out.sizes(), ")");
      rows.push_back(reshaped(p, p.slot(in), in.scalar_type(), in.sizes().vec(), {1, in.numel()}));
    }
    NodeArg stacked = p.node(
        "aten::cat", "", {CollectiveProgram::list(rows), CollectiveProgram::constant(int64_t{0})},
        {type_of(out.scalar_type(), {k, out.numel()})});
    NodeArg r = p.node("_c10d_functional::reduce_scatter_tensor", "",
                       {stacked, CollectiveProgram::constant(reduce),
                        CollectiveProgram::constant(k), CollectiveProgram::constant(name_)},
                       {type_of(out.scalar_type(), {1, out.numel()})});
    p.write(p.slot(out, /*read=*/false),
            reshaped(p, r, out.scalar_type(), {1, out.numel()}, out.sizes().vec()));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::REDUCE_SCATTER);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::alltoall_single(
    at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& output_splits,
    const std::vector<int64_t>& input_splits) {
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  TORCH_CHECK(input.dim() > 0 && output.dim() > 0,
              "all_to_all_single needs tensors of at least one dimension");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "all_to_all_single: output dtype ",
              output.scalar_type(), " differs from the input's ", input.scalar_type());
  const auto even_program = [&](const at::Tensor& in, const at::Tensor& out) {
    CollectiveProgram p("all_to_all_single", world_, layout_.timeout);
    NodeArg a =
        p.node("_c10d_functional::all_to_all_single", "",
               {p.slot(in), CollectiveProgram::constant(c10::IValue(std::vector<int64_t>{})),
                CollectiveProgram::constant(c10::IValue(std::vector<int64_t>{})),
                CollectiveProgram::constant(name_)},
               {type_of(in.scalar_type(), in.sizes().vec())});
    p.write(p.slot(out, /*read=*/false), a);
    return p.run(static_cast<int>(layout_.rank), c10d::OpType::ALLTOALL_BASE);
  };
  if (input_splits.empty() && output_splits.empty()) {
    TORCH_CHECK(input.size(0) % k == 0 && input.sizes() == output.sizes(),
                "all_to_all_single without split sizes needs equal input and output shapes whose "
                "first dimension splits into ",
                k, " equal parts, got ", input.sizes(), " and ", output.sizes());
    return even_program(input, output);
  }
  // Split sizes given (every rank gives them): the ranks tell each other theirs (one meeting on
  // the host), so that all choose the same program: the even one when every rank splits evenly,
  // else every rank pads each of its k parts to the longest part any rank sends, so that one
  // program with one shape serves them all, and takes its received parts out of the result.
  const auto splits_or_even = [&](const std::vector<int64_t>& splits, int64_t rows) {
    if (!splits.empty()) return splits;
    TORCH_CHECK(rows % k == 0, "all_to_all_single: ", rows, " rows do not split into ", k,
                " equal parts");
    return std::vector<int64_t>(static_cast<size_t>(k), rows / k);
  };
  const std::vector<int64_t> in_splits = splits_or_even(input_splits, input.size(0));
  const std::vector<int64_t> out_splits = splits_or_even(output_splits, output.size(0));
  TORCH_CHECK(
      static_cast<int64_t>(in_splits.size()) == k && static_cast<int64_t>(out_splits.size()) == k,
      "all_to_all_single: split sizes must have one entry per rank (", k, ")");
  TORCH_CHECK(
      std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0}) == input.size(0) &&
          std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0}) == output.size(0),
      "all_to_all_single: split sizes do not add up to the tensors' first dimensions");
  const int64_t row = input.numel() / std::max<int64_t>(input.size(0), 1);
  TORCH_CHECK(output.numel() / std::max<int64_t>(output.size(0), 1) == row || output.numel() == 0,
              "all_to_all_single: input and output rows differ in size");
  std::vector<std::string> all;
  {
    WithoutGil no_gil;
    // Both lists: every rank then checks every pair alike, so all raise or none does.
    std::string mine;
    for (int64_t s : in_splits) mine += std::to_string(s) + ",";
    for (int64_t s : out_splits) mine += std::to_string(s) + ",";
    all =
        runtime::exchange(*world_, layout_.rank, "all_to_all_single splits", mine, layout_.timeout);
  }
  std::vector<std::vector<int64_t>> sends, expects;  // [rank][peer]
  for (const std::string& entry : all) {
    std::vector<int64_t> v;
    std::stringstream ss(entry);
    for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoll(item));
    TORCH_INTERNAL_ASSERT(static_cast<int64_t>(v.size()) == 2 * k);
    sends.emplace_back(v.begin(), v.begin() + k);
    expects.emplace_back(v.begin() + k, v.end());
  }
  int64_t longest = 0;
  bool all_even = true;
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t sent = sends[static_cast<size_t>(r)][static_cast<size_t>(j)];
      const int64_t expected = expects[static_cast<size_t>(j)][static_cast<size_t>(r)];
      TORCH_CHECK(sent == expected, "all_to_all_single: rank ", r, " sends ", sent,
                  " rows to rank ", j, ", which expects ", expected);
      longest = std::max(longest, sent);
      all_even = all_even && sent == sends[0][0];
    }
  }
  if (all_even && input.sizes() == output.sizes()) return even_program(input, output);
  std::vector<int64_t> padded_sizes = input.sizes().vec();
  padded_sizes[0] = k * longest;
  at::Tensor padded = at::zeros(padded_sizes, input.options());
  int64_t at_row = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = in_splits[static_cast<size_t>(j)];
    if (n > 0) padded.narrow(0, j * longest, n).copy_(input.narrow(0, at_row, n));
    at_row += n;
  }
  at::Tensor received = at::empty(padded_sizes, input.options());
  if (longest > 0) even_program(padded, received);
  at_row = 0;
  at::AutoDispatchBelowADInplaceOrView collective_write;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = out_splits[static_cast<size_t>(j)];
    if (n > 0) output.narrow(0, at_row, n).copy_(received.narrow(0, j * longest, n));
    at_row += n;
  }
  std::vector<device::BufferPtr> buffers;
  if (output.numel() > 0) buffers.push_back(device::handle_of(output)->buffer());
  return c10::make_intrusive<XlaWork>(static_cast<int>(layout_.rank), c10d::OpType::ALLTOALL_BASE,
                                      std::vector<at::Tensor>{output}, std::move(buffers),
                                      layout_.timeout);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::alltoall(const std::vector<at::Tensor>& outputs,
                                                      const std::vector<at::Tensor>& inputs) {
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  TORCH_CHECK(static_cast<int64_t>(outputs.size()) == k && static_cast<int64_t>(inputs.size()) == k,
              "all_to_all: one input and one output per rank (", k, ")");
  const at::Tensor& first = inputs[0];
  const int64_t n = first.numel();
  for (const auto* list : {&inputs, &outputs}) {
    for (const at::Tensor& t : *list) {
      TORCH_CHECK(t.numel() == n && t.scalar_type() == first.scalar_type(),
                  "all_to_all on the tpu backend needs tensors of one size and dtype");
    }
  }
  CollectiveProgram p("all_to_all", world_, layout_.timeout);
  std::vector<NodeArg> rows;
  for (const at::Tensor& in : inputs) {
    rows.push_back(reshaped(p, p.slot(in), in.scalar_type(), in.sizes().vec(), {1, n}));
  }
  const TensorType stacked_type = type_of(first.scalar_type(), {k, n});
  NodeArg stacked = p.node("aten::cat", "",
                           {CollectiveProgram::list(rows), CollectiveProgram::constant(int64_t{0})},
                           {stacked_type});
  NodeArg a = p.node("_c10d_functional::all_to_all_single", "",
                     {stacked, CollectiveProgram::constant(c10::IValue(std::vector<int64_t>{})),
                      CollectiveProgram::constant(c10::IValue(std::vector<int64_t>{})),
                      CollectiveProgram::constant(name_)},
                     {stacked_type});
  for (int64_t r = 0; r < k; ++r) {
    const at::Tensor& out = outputs[static_cast<size_t>(r)];
    NodeArg row =
        p.node("aten::select", "int",
               {a, CollectiveProgram::constant(int64_t{0}), CollectiveProgram::constant(r)},
               {type_of(first.scalar_type(), {n})});
    p.write(p.slot(out, /*read=*/false),
            reshaped(p, row, first.scalar_type(), {n}, out.sizes().vec()));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::ALLTOALL);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::gather(
    const std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs,
    int root) {
  // An all-gather every rank runs alike (the root alone has outputs, which would make its
  // program another), then the root takes its rows.
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  const bool is_root = root == static_cast<int>(layout_.rank);
  TORCH_CHECK(!is_root || outputs.size() == inputs.size(), "gather: ", outputs.size(),
              " output lists for ", inputs.size(), " inputs on the root");
  std::vector<at::Tensor> gathered;
  for (const at::Tensor& in : inputs) {
    gathered.push_back(at::empty({k, in.numel()}, in.options()));
  }
  c10::intrusive_ptr<c10d::Work> work = allgather_into(gathered, inputs);
  if (!is_root) return work;
  std::vector<at::Tensor> result;
  std::vector<device::BufferPtr> buffers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(static_cast<int64_t>(outputs[i].size()) == k, "gather: ", outputs[i].size(),
                " outputs for a group of ", k, " ranks");
    for (int64_t r = 0; r < k; ++r) {
      const at::Tensor& out = outputs[i][static_cast<size_t>(r)];
      TORCH_CHECK(out.numel() == inputs[i].numel() && out.scalar_type() == inputs[i].scalar_type(),
                  "gather on the tpu backend: output ", r, " does not match the input");
      at::AutoDispatchBelowADInplaceOrView collective_write;
      out.copy_(gathered[i][r].view(out.sizes()));
      result.push_back(out);
      buffers.push_back(device::handle_of(out)->buffer());
    }
  }
  return c10::make_intrusive<XlaWork>(static_cast<int>(layout_.rank), c10d::OpType::GATHER,
                                      std::move(result), std::move(buffers), layout_.timeout);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::scatter(
    const std::vector<at::Tensor>& outputs, const std::vector<std::vector<at::Tensor>>& inputs,
    int root) {
  const int64_t k = static_cast<int64_t>(layout_.devices.size());
  const bool is_root = root == static_cast<int>(layout_.rank);
  CollectiveProgram p("scatter from " + std::to_string(root), world_, layout_.timeout);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    // One [k, n] tensor on every rank, so that all run one program: the root's rows, zeros
    // elsewhere (never read).
    at::Tensor stacked;
    if (is_root) {
      TORCH_CHECK(i < inputs.size() && static_cast<int64_t>(inputs[i].size()) == k,
                  "scatter: ", "the root needs one input per rank (", k, ")");
      std::vector<at::Tensor> rows;
      for (const at::Tensor& in : inputs[i]) {
        TORCH_CHECK(in.numel() == out.numel() && in.scalar_type() == out.scalar_type(),
                    "scatter on the tpu backend: an input (", in.scalar_type(), in.sizes(),
                    ") does not match the output (", out.scalar_type(), out.sizes(), ")");
        rows.push_back(in.reshape({1, out.numel()}));
      }
      stacked = at::cat(rows, 0);
    } else {
      stacked = at::zeros({k, out.numel()}, out.options());
    }
    NodeArg row = p.node("torchtpu::c10d_scatter", "",
                         {p.slot(stacked), CollectiveProgram::constant(int64_t{root}),
                          CollectiveProgram::constant(name_)},
                         {type_of(out.scalar_type(), {1, out.numel()})});
    p.write(p.slot(out, /*read=*/false),
            reshaped(p, row, out.scalar_type(), {1, out.numel()}, out.sizes().vec()));
  }
  return p.run(static_cast<int>(layout_.rank), c10d::OpType::SCATTER);
}

std::shared_ptr<const runtime::ReplicaWorld> XlaTransport::pair_world(int peer) const {
  const int me = static_cast<int>(layout_.rank);
  TORCH_CHECK(peer >= 0 && peer < static_cast<int>(layout_.devices.size()) && peer != me,
              "torchtpu: send/recv peer ", peer, " is not another rank of this group of ",
              layout_.devices.size());
  auto world = std::make_shared<runtime::ReplicaWorld>();
  const int lo = std::min(me, peer), hi = std::max(me, peer);
  world->key = layout_.uid + "/p2p " + std::to_string(lo) + "-" + std::to_string(hi);
  world->devices = {layout_.devices[static_cast<size_t>(lo)],
                    layout_.devices[static_cast<size_t>(hi)]};
  world->groups[name_] = {{0, 1}};
  world->in_process = layout_.in_process;
  world->timeout = layout_.timeout;
  return world;
}

c10::intrusive_ptr<c10d::Work> XlaTransport::run_p2p(const PeerOp& op) {
  const int me = static_cast<int>(layout_.rank);
  const int64_t my_pos = me < op.peer ? 0 : 1;
  const int64_t source = op.send ? my_pos : 1 - my_pos;
  CollectiveProgram p("send/recv " + std::to_string(op.send ? me : op.peer) + " -> " +
                          std::to_string(op.send ? op.peer : me),
                      pair_world(op.peer), layout_.timeout);
  for (const at::Tensor& t : op.tensors) {
    NodeArg s = p.slot(t);
    p.write(
        s,
        p.node(
            "torchtpu::c10d_permute", "",
            {s, CollectiveProgram::constant(c10::IValue(std::vector<int64_t>{source, 1 - source})),
             CollectiveProgram::constant(name_)},
            {type_of(t.scalar_type(), t.sizes().vec())}));
  }
  return p.run(me, op.send ? c10d::OpType::SEND : c10d::OpType::RECV);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::send(const std::vector<at::Tensor>& tensors,
                                                  int peer) {
  PeerOp op{tensors, peer, true, peer_ops_[peer]++};
  if (coalescing_) {
    deferred_.push_back(std::move(op));
    return nullptr;
  }
  peer_ops_.clear();
  return run_p2p(op);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::recv(const std::vector<at::Tensor>& tensors,
                                                  int peer) {
  PeerOp op{tensors, peer, false, peer_ops_[peer]++};
  if (coalescing_) {
    deferred_.push_back(std::move(op));
    return nullptr;
  }
  peer_ops_.clear();
  return run_p2p(op);
}

c10::intrusive_ptr<c10d::Work> XlaTransport::barrier() {
  // As NCCL's barrier does, it also waits for this rank's own device work.
  exec::synchronize(device_index_);
  at::Tensor one = at::ones(
      {1}, at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1,
                                                  static_cast<c10::DeviceIndex>(device_index_))));
  c10::intrusive_ptr<c10d::Work> work = allreduce({one}, c10d::ReduceOp::SUM);
  work->wait();
  return work;
}

void XlaTransport::start_coalescing() {
  coalescing_ = true;
  deferred_.clear();
  peer_ops_.clear();
}

std::vector<c10::intrusive_ptr<c10d::Work>> XlaTransport::end_coalescing() {
  coalescing_ = false;
  // Every pair of ranks runs its sends and receives in the order both derive: by the pair (lower
  // rank first), then by their order within the pair. Each rank goes through its pairs in one
  // global order, so the batch completes whatever order the ranks listed it in.
  const int me = static_cast<int>(layout_.rank);
  std::vector<PeerOp> ops = std::move(deferred_);
  deferred_.clear();
  peer_ops_.clear();
  std::stable_sort(ops.begin(), ops.end(), [me](const PeerOp& a, const PeerOp& b) {
    const auto key = [me](const PeerOp& o) {
      return std::make_tuple(std::min(me, o.peer), std::max(me, o.peer), o.order);
    };
    return key(a) < key(b);
  });
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const PeerOp& op : ops) works.push_back(run_p2p(op));
  return works;
}

// ---- choosing the transport ----------------------------------------------------------------

std::unique_ptr<XlaTransport> select_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int size, const std::string& group_name,
                                               std::vector<int64_t> global_ranks,
                                               std::chrono::milliseconds timeout,
                                               std::string* why) {
  if (global_ranks.empty()) {
    global_ranks.resize(static_cast<size_t>(size));
    std::iota(global_ranks.begin(), global_ranks.end(), 0);
  }
  const int device_index = device::current_device();
  runtime::forget_group(device_index, group_name);
  const std::string wanted = config::raw("TORCHTPU_COLLECTIVES").value_or("auto");
  TORCH_CHECK(wanted == "auto" || wanted == "host",
              "TORCHTPU_COLLECTIVES must be auto or host, "
              "got '",
              wanted, "'");
  // Each rank says which process it is, which device it took (torch index and PJRT global id),
  // which multi-process PJRT world its client is ("" if none) and whether it wants host staging;
  // a key per rank, so the exchange costs one set and `size` gets. pjrt::plan_transport decides.
  // The global id needs the client: asked only where it exists or this process is joining a
  // multi-process world (a host-staged group must not start the device by itself).
  int64_t device_id = -1;
  if (runtime::is_initialized() || runtime::process_world_pending()) {
    runtime::Runtime& rt = runtime::get();
    if (device_index >= 0 && device_index < rt.device_count() && rt.owns_device(device_index)) {
      device_id = rt.device(device_index).id();
    }
  }
  const std::string mine = runtime::process_token() + "|" + std::to_string(device_index) + "|" +
                           std::to_string(device_id) + "|" + runtime::process_world_id() + "|" +
                           (wanted == "host" ? "host" : "auto");
  const std::string prefix = "tpu_transport/";
  store->set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<pjrt::RankEntry> entries(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    std::vector<uint8_t> v = store->get(prefix + std::to_string(r));
    std::vector<std::string> fields;
    std::string s(v.begin(), v.end());
    for (size_t start = 0;;) {  // process|index|id|world|want; the process token has no '|'
      const size_t bar = s.find('|', start);
      fields.push_back(s.substr(start, bar == std::string::npos ? bar : bar - start));
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    TORCH_CHECK(fields.size() == 5, "torchtpu: rank ", r, " sent a malformed transport entry '", s,
                "' (mixed torchtpu versions?)");
    pjrt::RankEntry& e = entries[static_cast<size_t>(r)];
    e.process = fields[0];
    e.device_index = std::stoi(fields[1]);
    e.device_id = std::stoll(fields[2]);
    e.world = fields[3];
    e.wants_host = fields[4] == "host";
  }
  const pjrt::TransportPlan plan = pjrt::plan_transport(entries, runtime::no_process_world_why());
  if (plan.kind == pjrt::TransportPlan::kHost) {
    *why = plan.why;
    return nullptr;
  }
  runtime::GroupLayout layout;
  // Rank 0 names the group for all: unique among this process's groups and any other's.
  static std::atomic<uint64_t> groups_made{0};
  if (rank == 0) {
    const std::string uid = runtime::process_token() + "#" + std::to_string(groups_made++);
    store->set(prefix + "uid", std::vector<uint8_t>(uid.begin(), uid.end()));
  }
  const std::vector<uint8_t> uid = store->get(prefix + "uid");
  layout.uid.assign(uid.begin(), uid.end());
  layout.rank = rank;
  layout.global_ranks = global_ranks;
  // Thread ranks of one process, each on its own device; or one multi-process PJRT world.
  layout.in_process = plan.kind == pjrt::TransportPlan::kInProcess;
  layout.timeout = timeout;
  layout.devices = plan.devices;
  if (layout.in_process) {
    // Thread ranks: this process's own client numbers every rank's device.
    runtime::Runtime& rt = runtime::get();
    for (int r = 0; r < size; ++r) {
      const int index = entries[static_cast<size_t>(r)].device_index;
      if (index < 0 || index >= rt.device_count() || !rt.owns_device(index)) {
        *why = "rank " + std::to_string(r) + " uses tpu:" + std::to_string(index) +
               ", which this process does not have";
        return nullptr;
      }
      layout.devices[static_cast<size_t>(r)] = rt.device(index).id();
    }
  }
  const bool whole_world = static_cast<int64_t>(global_ranks.size()) == size &&
                           std::is_sorted(global_ranks.begin(), global_ranks.end()) &&
                           global_ranks.front() == 0 && global_ranks.back() == size - 1;
  if (group_name == "0" || (whole_world && !runtime::find_group(device_index, "0"))) {
    runtime::set_world_devices(device_index, layout.devices);
  }
  *why = layout.in_process ? "its ranks are threads of this process, each on its own device"
                           : "its ranks' devices are one multi-process PJRT world";
  return std::make_unique<XlaTransport>(group_name, std::move(layout), device_index);
}

}  // namespace torchtpu::distributed
