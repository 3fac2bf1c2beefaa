#include "exec/program.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "device/buckets.h"
#include "device/current_device.h"
#include "device/storage.h"
#include "exec/executor.h"
#include "lowering/checks.h"
#include "lowering/strided.h"
#include "runtime/determinism.h"
#include "runtime/device_checks.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "stablehlo/builder.h"
#include "stablehlo/inspect.h"
#include "stablehlo/precision.h"

namespace torchtpu::exec {

using lowering::LArg;
using shlo::ElementType;
using shlo::TensorType;
using shlo::Value;

namespace {

// Builds one module over a CallState's slots: what eager ops and compiled graphs share.
class Builder {
 public:
  Builder(CallState& state, ProgramEntry& e) : state_(state), e_(e), params_(state.params.size()) {}

  std::string build(const ProgramSpec& spec) {
    discard_ = &spec.discard;
    donate_ = spec.donate;
    plan_collectives(spec);
    for (const Node& node : spec.nodes) {
      // The node's result types; a node that overwrites a slot is typed as it.
      std::vector<TensorType> want = node.out_types;
      int written = -1;
      if (node.overwrites_self) {
        TORCH_CHECK(node.args.at(0).kind == NodeArg::Kind::kInput, "torchtpu: ", node.name,
                    " into a graph intermediate is not supported");
        written = node.args[0].index;
        const ArgDesc& d = slot(written);
        want = {TensorType(lowering::to_element_type(d.dtype), d.view.sizes)};
      }
      node_rng_ = node.rng_param;
      std::vector<LArg> largs;
      for (size_t k = 0; k < node.args.size(); ++k) {
        largs.push_back(k == 0 && written >= 0
                            ? LArg()  // overwritten, not read: no argument
                            : arg(node.args[k], node.schema->arguments()[k], spec.rng_streams));
      }
      std::vector<Value> results;
      {
        // The node's own checks, so that each is known by the node that made it.
        lowering::CheckCollector node_checks;
        try {
          results = lower(node, std::move(largs), want, spec.rng_streams);
        } catch (const c10::NotImplementedError&) {
          throw;
        } catch (const c10::Error& err) {
          if (spec.graph.empty()) throw;
          TORCH_CHECK(false, "torchtpu: lowering ", node.name, " in graph ", spec.graph,
                      " failed: ", err.what_without_backtrace());
        }
        for (lowering::DeviceCheck& c : node_checks.take()) {
          checks_.add(std::move(c));
          e_.check_nodes.push_back(static_cast<int>(env_.size()));
        }
      }
      // The slot's storage receives the value when the program finishes.
      if (written >= 0) overwritten_[written] = results.at(0);
      for (const auto& [d, k] : node.writes)
        write(*d, results.at(static_cast<size_t>(k)), node.name);
      env_.push_back(std::move(results));
      for (const auto& t : node.out_types) e_.rng_numel += static_cast<uint64_t>(t.numel());
    }
    for (size_t i = 0; i < spec.returns.size(); ++i) {
      add_return(value_of(spec.returns[i]), i < spec.layouts.size() ? spec.layouts[i] : Layout{});
    }
    for (const auto& [d, v] : spec.writes) write(*d, value_of(v), spec.name);
    // Outputs in slot order (a graph's), each storage's once its writes are done.
    for (const auto& [index, value] : overwritten_) {
      const Param& p = state_.params[static_cast<size_t>(slot(index).param)];
      if (p.kind == Param::Kind::kStorage) {
        write(slot(index), value, spec.name);
        add_written(spec.donate);
        continue;
      }
      // A CPU input (a 0-d tensor such as an optimizer's step count): copied back after launch.
      const TensorType type(lowering::to_element_type(p.cpu_tensor.scalar_type()),
                            p.cpu_tensor.sizes().vec());
      OutputSink sink;
      sink.to_cpu_input = true;
      sink.index = index;
      sink.sizes = type.shape;
      add_output(lowering::coerce(b(), value, type), sink);
    }
    add_written(spec.donate);
    // The lowerings' device-side checks, packed into one last output; its buffer goes to the
    // runtime after launch, which words a failed check's error.
    std::vector<lowering::DeviceCheck> checks = checks_.take();
    if (!checks.empty()) {
      outputs_.push_back(lowering::pack_checks(b(), checks));
      auto specs = std::make_shared<std::vector<runtime::CheckSpec>>();
      for (const lowering::DeviceCheck& c : checks) {
        specs->push_back({c.op, c.message,
                          c.index_error ? runtime::CheckError::kIndexError
                                        : runtime::CheckError::kRuntimeError});
      }
      e_.checks = std::move(specs);
    }
    module_.finish(outputs_);
    e_.used_params = used_;
    return module_.str();
  }

 private:
  shlo::FunctionBuilder& b() { return module_.main(); }

  // A spec with collective nodes becomes a program of one replica per device of their world,
  // which the eager backend gives and compiled graphs plan from the groups they name.
  void plan_collectives(const ProgramSpec& spec) {
    std::vector<std::string> groups;
    for (const Node& node : spec.nodes) {
      if (node.descriptor == nullptr || !node.descriptor->collective()) continue;
      ++e_.collectives;
      const auto& schema_args = node.schema->arguments();
      for (size_t k = 0; k < schema_args.size() && k < node.args.size(); ++k) {
        if (schema_args[k].name() != "group_name") continue;
        const c10::IValue& v = node.args[k].constant;
        TORCH_CHECK_NOT_IMPLEMENTED(node.args[k].kind == NodeArg::Kind::kConst && v.isString(),
                                    "torchtpu: ", node.name,
                                    " with a group that is not a constant");
        if (std::find(groups.begin(), groups.end(), v.toStringRef()) == groups.end()) {
          groups.push_back(v.toStringRef());
        }
      }
    }
    if (e_.collectives == 0) return;
    if (spec.world) {
      e_.world = spec.world;
    } else {
      const int dev = state_.device >= 0 ? state_.device : device::current_device();
      e_.world = std::make_shared<const runtime::ReplicaWorld>(runtime::plan_world(dev, groups));
    }
    module_.set_num_replicas(static_cast<int64_t>(e_.world->devices.size()));
  }
  const ArgDesc& slot(int index) const { return state_.args[static_cast<size_t>(index)]; }

  // A size-generic call's positions and runtime geometry (exec/generic.h), made at first use.
  lowering::GenericSpace& space() {
    if (!space_) {
      const int64_t count = device::bucket_elements(lowering::numel_of(state_.out_sizes));
      // 32-bit positions and indices where every buffer allows (faster division on CPUs).
      int64_t largest = count;
      for (const Param& p : state_.params) {
        if (p.kind == Param::Kind::kStorage)
          largest = std::max(largest, lowering::numel_of(p.dims));
      }
      const ElementType index =
          largest < (int64_t{1} << 31) ? ElementType::kS32 : ElementType::kS64;
      space_.emplace(b(), param(state_.geometry_param), state_.generic_rank, count, index);
    }
    return *space_;
  }

  // The program argument of CallState.params[index], added at its first use.
  Value param(int index) {
    auto& value = params_[static_cast<size_t>(index)];
    if (!value) {
      const Param& p = state_.params[static_cast<size_t>(index)];
      value = b().add_argument(
          p.kind == Param::Kind::kStorage     ? TensorType(p.dtype, p.dims)
          : p.kind == Param::Kind::kGenerator ? TensorType(ElementType::kU64, {2})
          : p.kind == Param::Kind::kInts
              ? TensorType(ElementType::kS64, {static_cast<int64_t>(p.ints.size())})
              : TensorType(p.dtype, {}));
      used_.push_back(index);
    }
    return *value;
  }

  // A slot's view; a runtime offset is a program argument, so moving the view never recompiles.
  lowering::StridedView view_of(const ArgDesc& d) {
    lowering::StridedView view = d.view;
    if (d.offset_param >= 0) view.offset_value = param(d.offset_param);
    return view;
  }

  // A tensor slot's value: its view gathered from its storage (zeros for a never-written storage,
  // folded by XLA, never a transfer), or the runtime scalar of a CPU 0-d tensor. A slot read twice
  // is one value.
  Value read(const ArgDesc& d) {
    auto it = reads_.find(&d);
    if (it != reads_.end()) return it->second;
    const Param& p = state_.params[static_cast<size_t>(d.param)];
    ElementType want = lowering::to_element_type(d.dtype);
    std::optional<Value> v;
    // Written earlier in this program (a node's writes): read on top of that write.
    auto last = std::find_if(written_.rbegin(), written_.rend(),
                             [&](const auto& w) { return w.first == d.param; });
    if (p.kind == Param::Kind::kStorage && last != written_.rend()) {
      return lowering::read_view(b(), lowering::reinterpret(b(), last->second, want), view_of(d));
    }
    if (p.kind != Param::Kind::kStorage) {
      v = param(d.param);
    } else if (!p.buffer) {
      v = b().constant(0, TensorType(want, d.view.sizes));
    } else if (d.generic_view >= 0) {
      Value base = lowering::reinterpret(b(), param(d.param), want);
      v = space().read(base, space().view_at(d.generic_view));
    } else {
      // The storage's argument before its offset's: the order of the program's arguments.
      Value base = lowering::reinterpret(b(), param(d.param), want);
      v = lowering::read_view(b(), base, view_of(d));
    }
    return reads_.emplace(&d, *v).first->second;
  }

  // A graph input as a slot, or as the value a node overwrote it with.
  Value value_of(const NodeArg& a) {
    if (a.kind == NodeArg::Kind::kInput) {
      auto w = overwritten_.find(a.index);
      return w != overwritten_.end() ? w->second : read(slot(a.index));
    }
    TORCH_CHECK(a.kind == NodeArg::Kind::kNode, "torchtpu: graph argument is not a tensor");
    return env_.at(static_cast<size_t>(a.index)).at(static_cast<size_t>(a.output));
  }

  // The device's default generator (one program argument, drawn at every launch). With `stream`,
  // use k draws from (seed, offset + k << 32), so a graph's random nodes draw apart.
  Value rng(bool stream) {
    if (!rng_) {
      rng_ = b().add_argument(TensorType(ElementType::kU64, {2}));
      used_.push_back(-1);
    }
    if (!stream || rng_uses_++ == 0) return *rng_;
    TensorType one(ElementType::kU64, {1});
    return b().add(*rng_, b().concatenate({b().constant_int(0, one),
                                           b().constant_int(int64_t{rng_uses_ - 1} << 32, one)},
                                          0));
  }

  // A Python number baked into the program (a default Scalar, a graph's constant).
  Value constant(const c10::Scalar& s, ElementType type) {
    TensorType t(type, {});
    if (!s.isComplex()) {
      return s.isIntegral(true) ? b().constant_int(s.toLong(), t) : b().constant(s.toDouble(), t);
    }
    // A complex literal (`x * 0.5j`): built from its two parts, which builder constants (real
    // splats) cannot express in one.
    TensorType part(shlo::complex_component(type), {});
    c10::complex<double> c = s.toComplexDouble();
    return b().op("stablehlo.complex", {b().constant(c.real(), part), b().constant(c.imag(), part)},
                  t);
  }

  // A node's argument as its lowering sees it.
  LArg arg(const NodeArg& a, const c10::Argument& schema_arg, bool streams) {
    if (a.kind == NodeArg::Kind::kInput && overwritten_.count(a.index) == 0) {
      return slot_arg(slot(a.index), a.constant);
    }
    LArg la;
    la.ivalue = a.constant;
    const c10::TypePtr& type = schema_arg.type();
    if (is_generator_type(type)) {
      la.kind = LArg::Kind::kGenerator;
      la.value = rng(streams);
    } else if (a.kind == NodeArg::Kind::kInput || a.kind == NodeArg::Kind::kNode) {
      la.kind = LArg::Kind::kTensor;
      la.value = value_of(a);
    } else if (a.kind == NodeArg::Kind::kList) {
      la.kind = LArg::Kind::kTensorList;
      for (const NodeArg& item : a.items) {
        la.values.push_back(item.kind == NodeArg::Kind::kNone ? std::nullopt
                                                              : std::optional(value_of(item)));
      }
    } else if (a.kind == NodeArg::Kind::kScalarInput) {
      la.kind = LArg::Kind::kScalar;
      la.value = b().convert(read(slot(a.index)),
                             scalar_element_type(a.constant.toScalar(), state_.any_f64));
    } else if (a.kind == NodeArg::Kind::kConst && a.constant.isScalar() &&
               (is_scalar_type(type) || type->kind() == c10::TypeKind::TensorType ||
                type->str() == "Tensor?")) {
      // Dynamo specialized this Python number into the graph: a constant of its type.
      la.kind = LArg::Kind::kScalar;
      la.value = constant(a.constant.toScalar(),
                          scalar_element_type(a.constant.toScalar(), state_.any_f64));
    } else {
      la.kind = a.kind == NodeArg::Kind::kConst ? LArg::Kind::kConst : LArg::Kind::kNone;
    }
    return la;
  }

  // A slot as its lowering argument; `v` is the call's value (None for a graph input).
  LArg slot_arg(const ArgDesc& d, const c10::IValue& v) {
    LArg a;
    // `ivalue` is the call's value: for a tensor, its own layout, which the few lowerings whose
    // results follow the CPU kernel's layout read (LU of A^T for contiguous A).
    a.ivalue = v;
    switch (d.kind) {
      case ArgDesc::Kind::kTensor:
        a.kind = LArg::Kind::kTensor;
        a.value = read(d);
        break;
      case ArgDesc::Kind::kTensorList:
        a.kind = LArg::Kind::kTensorList;
        a.ivalue = c10::IValue();
        for (const ArgDesc& item : d.items) {
          a.values.push_back(item.kind == ArgDesc::Kind::kNone ? std::nullopt
                                                               : std::optional(read(item)));
        }
        break;
      case ArgDesc::Kind::kScalar:
      case ArgDesc::Kind::kGenerator:
        a.kind = d.kind == ArgDesc::Kind::kScalar ? LArg::Kind::kScalar : LArg::Kind::kGenerator;
        a.value = param(d.param);
        break;
      case ArgDesc::Kind::kScalarList:
        // lowering/numbers.h: a runtime int list arrives as a list of 0-d values.
        a.kind = LArg::Kind::kTensorList;
        for (const ArgDesc& item : d.items) a.values.push_back(param(item.param));
        break;
      case ArgDesc::Kind::kDefaultScalar:
        a.kind = LArg::Kind::kScalar;
        a.value = constant(v.toScalar(), lowering::to_element_type(d.dtype));
        a.is_default = true;
        break;
      case ArgDesc::Kind::kConst:
        a.kind = LArg::Kind::kConst;
        break;
      case ArgDesc::Kind::kNone:
        a.kind = LArg::Kind::kNone;
        break;
    }
    return a;
  }

  // Runs a node's lowering and checks that it returns exactly `want`.
  std::vector<Value> lower(const Node& node, std::vector<LArg> args,
                           const std::vector<TensorType>& want, bool streams) {
    lowering::LoweringContext ctx(b(), *node.schema, std::move(args), want,
                                  runtime::get().platform());
    ctx.set_rng_source(
        [this, streams] { return node_rng_ >= 0 ? param(node_rng_) : rng(streams); });
    if (e_.world) {
      const runtime::ReplicaWorld& world = *e_.world;
      ctx.set_collective_source(
          [&world](const std::string& group) -> const shlo::ReplicaGroups& {
            auto it = world.groups.find(group);
            TORCH_CHECK_NOT_IMPLEMENTED(it != world.groups.end(), "torchtpu: process group '",
                                        group, "' is not part of this program's world");
            return it->second;
          },
          static_cast<int64_t>(world.devices.size()));
    }
    std::vector<Value> results = (*node.lowering)(ctx);
    TORCH_CHECK(results.size() == want.size(), "torchtpu: lowering of ", node.name, " returned ",
                results.size(), " values, expected ", want.size());
    for (size_t i = 0; i < results.size(); ++i) {
      TORCH_CHECK(results[i].type == want[i], "torchtpu: lowering of ", node.name, " produced ",
                  results[i].type.str(), " for output ", i, " but PyTorch expects ", want[i].str());
    }
    return results;
  }

  // Writes `v` (converted to the slot's dtype) into the slot's view of its storage; writes land in
  // order, so a storage written twice keeps the second on top of the first.
  void write(const ArgDesc& d, Value v, const std::string& op) {
    TORCH_CHECK(d.kind == ArgDesc::Kind::kTensor, "torchtpu: ", op,
                " mutates a non-tensor argument");
    v = b().convert(v, lowering::to_element_type(d.dtype));
    TORCH_CHECK(v.shape() == d.view.sizes, "torchtpu: ", op,
                " result shape differs from the written tensor");
    const Param& p = state_.params[static_cast<size_t>(d.param)];
    // The storage's latest write, which this one lands on top of; one already output (a graph's
    // aliased inputs) is followed by a new output.
    auto last = std::find_if(written_.rbegin(), written_.rend(),
                             [&](const auto& w) { return w.first == d.param; });
    std::optional<Value> base;
    if (last != written_.rend()) {
      base = last->second;
    } else if (p.buffer && (donate_ || d.offset_param >= 0 || d.generic_view >= 0 ||
                            !lowering::covers_storage(p.dims, p.dtype, d.view, v.dtype()))) {
      // A write replacing the whole storage needs its old buffer only to donate it: as an
      // unused argument it would make the program differ by whether the storage was ever
      // written (the ranks of a collective must launch one program). A size-generic view's
      // geometry is a runtime value, so its program keeps the old buffer.
      base = param(d.param);
    }
    Value stored = d.generic_view >= 0
                       ? space().write(base ? *base : b().constant(0, TensorType(p.dtype, p.dims)),
                                       space().view_at(d.generic_view), v)
                       : lowering::write_storage(b(), base, p.dims, p.dtype, view_of(d), v);
    if (last != written_.rend() && static_cast<size_t>(written_.rend() - last) > added_) {
      last->second = stored;
    } else {
      written_.emplace_back(d.param, stored);
    }
  }

  // A new tensor. A layout (see executor.cpp's dense_layout): stored in memory order, returned
  // with the CPU's strides (without given strides: the dense strides of that order).
  void add_return(Value v, const Layout& layout) {
    OutputSink sink;
    sink.index = returns_++;
    sink.sizes = v.shape();
    const std::vector<int64_t>& perm = layout.perm;
    if (!perm.empty()) {
      sink.strides = layout.strides;
      if (sink.strides.empty()) {
        sink.strides.assign(perm.size(), 0);
        int64_t stride = 1;
        for (size_t k = perm.size(); k-- > 0;) {
          sink.strides[static_cast<size_t>(perm[k])] = stride;
          stride *= sink.sizes[static_cast<size_t>(perm[k])];
        }
      }
      // Already in memory order when only size-1 dims' strides differ from contiguous's.
      if (!std::is_sorted(perm.begin(), perm.end())) v = b().transpose(v, perm);
    }
    add_output(as_stored(v), sink);
  }

  // A value as a storage's buffer holds it (device::flat_buffers): 1-D, and padded with zeros
  // to its size bucket (device/buckets.h) where that is larger.
  Value as_stored(Value v) {
    if (!device::flat_buffers()) return v;
    const int64_t n = lowering::numel_of(v.shape());
    if (v.shape().size() != 1) v = b().reshape(v, {n});
    const int64_t stored = device::buffer_dims({n})[0];
    if (stored == n) return v;
    return b().pad(v, b().constant(0, TensorType(v.dtype(), {})), {0}, {stored - n}, {0});
  }

  // The storages written since the last call, as outputs. With `donate`, an old buffer that is an
  // argument of the same type is donated: XLA updates it in place.
  void add_written(bool donate) {
    for (; added_ < written_.size(); ++added_) {
      const int index = written_[added_].first;
      if (discard_ && static_cast<size_t>(index) < discard_->size() &&
          (*discard_)[static_cast<size_t>(index)]) {
        continue;
      }
      const Value stored = as_stored(written_[added_].second);
      const auto& old = params_[static_cast<size_t>(index)];
      for (size_t k = 0; donate && old && old->type == stored.type && k < used_.size(); ++k) {
        if (used_[k] != index) continue;
        b().set_argument_attrs(
            k, "tf.aliasing_output = " + std::to_string(outputs_.size()) + " : i32");
      }
      OutputSink sink;
      sink.to_storage = true;
      sink.index = index;
      add_output(stored, sink);
    }
  }

  void add_output(Value v, OutputSink& sink) {
    sink.dims = v.shape();
    sink.element_type = v.dtype();
    sink.dtype = lowering::to_scalar_type(sink.element_type);
    e_.outputs.push_back(std::move(sink));
    outputs_.push_back(v);
  }

  CallState& state_;
  ProgramEntry& e_;
  shlo::ModuleBuilder module_;
  lowering::CheckCollector checks_;  // every lowering's device-side checks
  std::vector<std::optional<Value>> params_;
  std::vector<int> used_;  // program argument k is state_.params[used_[k]]; -1: the generator
  std::unordered_map<const ArgDesc*, Value> reads_;
  std::vector<std::vector<Value>> env_;         // per node, its results
  std::map<int, Value> overwritten_;            // slot -> the value a node wrote into it
  std::vector<std::pair<int, Value>> written_;  // storage param -> its new buffer, in order
  std::vector<Value> outputs_;
  std::optional<Value> rng_;
  std::optional<lowering::GenericSpace> space_;
  int rng_uses_ = 0;
  int node_rng_ = -1;                           // the node being lowered: its Node::rng_param
  const std::vector<bool>* discard_ = nullptr;  // ProgramSpec::discard
  bool donate_ = false;
  int returns_ = 0;
  size_t added_ = 0;  // written_[0, added_) are outputs already
};

}  // namespace

bool has_collectives(const ProgramSpec& spec) {
  return std::any_of(spec.nodes.begin(), spec.nodes.end(), [](const Node& n) {
    return n.descriptor != nullptr && n.descriptor->collective();
  });
}

std::string compile_options_of(const ProgramEntry& e) {
  std::vector<pjrt::OptionOverride> overrides;
  if (e.deterministic) overrides = runtime::deterministic_overrides();
  if (e.world) return pjrt::replicated_compile_options(e.world->devices, overrides);
  return overrides.empty() ? std::string() : pjrt::portable_compile_options(overrides);
}

namespace {

// torch.use_deterministic_algorithms(True): counted, and where the platform needs XLA's option
// but its plugin has none, a program that accumulates floats with atomics raises (warns under
// warn_only) through torch's own alert, as CUDA's nondeterministic kernels do.
void check_determinism(const ProgramSpec& spec, const std::string& text, ProgramEntry& e) {
  e.deterministic = true;
  runtime::metrics().deterministic_programs++;
  const runtime::DeterminismPlan& plan = runtime::determinism_plan();
  if (plan.route == runtime::DeterminismRoute::kCompileOption) {
    runtime::metrics().deterministic_option_programs++;
  } else if (plan.route == runtime::DeterminismRoute::kUnavailable &&
             shlo::accumulating_float_scatters(text) > 0) {
    at::globalContext().alertNotDeterministic(
        (spec.graph.empty() ? spec.name : spec.graph) + " on XLA:" + plan.platform +
        " (a floating-point scatter-add, run with atomics: the plugin takes none of XLA's "
        "deterministic-ops options)");
  }
}

}  // namespace

std::string build(const ProgramSpec& spec, CallState& state, ProgramEntry& e) {
  // Counted so a warm restart can show it lowered nothing (recipes: exec/recipe.h).
  runtime::metrics().modules_lowered++;
  // torch.set_float32_matmul_precision of the call, for every f32 product any lowering emits.
  shlo::F32PrecisionScope precision(state.numerics.f32_dot);
  std::string text = Builder(state, e).build(spec);
  if (state.numerics.deterministic) check_determinism(spec, text, e);
  return text;
}

c10::SmallVector<at::Tensor, 4> launch(const ProgramEntry& e, CallState& state,
                                       const torch::jit::Stack& stack,
                                       const std::vector<at::Tensor>& inputs, size_t num_returns,
                                       const runtime::ReplicaWorld* world,
                                       const std::vector<int64_t>* call_sizes,
                                       const std::vector<int64_t>* call_strides) {
  const int dev = state.device >= 0 ? state.device : device::current_device();
  int launch_id = 0;
  if (e.world) {
    const runtime::ReplicaWorld& meet = world != nullptr ? *world : *e.world;
    TORCH_INTERNAL_ASSERT(meet.devices == e.world->devices);
    e.program->wait();  // the replicas meet with their executable
    launch_id =
        runtime::coordinate_launch(meet, runtime::replica_of(meet, dev), &e.program->executable(),
                                   e.program->signature(), meet.timeout);
    runtime::metrics().collectives_in_program += e.collectives;
  }
  std::vector<device::BufferPtr> outputs =
      launch_program(*e.program, e.used_params, state, stack, e.rng_numel, dev, launch_id);
  // Before any write lands: under TPU_LAUNCH_BLOCKING=1 a failed check raises here.
  if (e.checks) runtime::defer_checks(dev, std::move(outputs.back()), e.checks);
  const auto new_tensor = [&](const OutputSink& o, device::BufferPtr buffer) {
    if (call_sizes != nullptr) {
      return wrap_buffer(std::move(buffer), o.dims, *call_sizes,
                         call_strides ? c10::IntArrayRef(*call_strides) : c10::IntArrayRef(),
                         o.dtype, dev);
    }
    return wrap_buffer(std::move(buffer), o.dims, o.sizes, o.strides, o.dtype, dev);
  };
  c10::SmallVector<at::Tensor, 4> returns(num_returns);
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    const OutputSink& o = e.outputs[k];
    const auto index = static_cast<size_t>(o.index);
    if (o.to_storage) {
      static_cast<device::StorageHandle*>(state.params[index].storage->data_ptr().get_context())
          ->set_buffer(std::move(outputs[k]), o.dims, o.element_type);
    } else if (o.to_cpu_input) {
      // Waits for the program: the CPU tensor must hold its new value when the graph returns.
      at::Tensor cpu = inputs.at(index);
      cpu.copy_(new_tensor(o, std::move(outputs[k])));
    } else {
      TORCH_INTERNAL_ASSERT(index < returns.size(), "torchtpu: a program returns too many tensors");
      returns[index] = new_tensor(o, std::move(outputs[k]));
    }
  }
  return returns;
}

}  // namespace torchtpu::exec
