#include "aten/graph_executor.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>

#include "aten/call_state.h"
#include "aten/check_outputs.h"
#include "aten/executor.h"
#include "aten/op_plan.h"
#include "config/config.h"
#include "device/current_device.h"
#include "runtime/compile.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::aten {
namespace {

using lowering::LArg;
using shlo::ElementType;
using shlo::TensorType;
using shlo::Value;

bool donation_enabled() {
  static const bool on = config::flag("TORCHTPU_DONATE", true);
  return on;
}

// One description per input, for compile logs and error messages.
std::vector<std::string> describe_inputs(const std::vector<at::Tensor>& inputs) {
  std::vector<std::string> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::ostringstream os;
    const at::Tensor& t = inputs[i];
    os << "input" << i << "=" << c10::toString(t.scalar_type()) << t.sizes();
    if (!t.is_contiguous()) os << " strides " << t.strides();
    out.push_back(os.str());
  }
  return out;
}

}  // namespace

struct GraphExecutable::Entry {
  struct Out {
    bool to_storage = false;
    // A mutated CPU input (a 0-d CPU tensor such as a non-capturable optimizer's step count):
    // the program returns its new value and the host copies it back after the run.
    bool to_cpu_input = false;
    int index = 0;  // storage param, new-tensor slot, or graph input (to_cpu_input)
    std::vector<int64_t> dims;
    c10::ScalarType dtype = c10::kFloat;
    ElementType element_type = ElementType::kF32;
  };
  std::shared_ptr<runtime::Program> program;
  std::vector<int> used_params;
  std::vector<Out> outs;
  int num_new = 0;
  // Per graph output: (0, slot) new tensor, (1, input) the input itself, (2, -) None.
  std::vector<std::pair<int, int>> results;
  uint64_t rng_numel = 0;
  runtime::CheckSpecs checks;  // device-side checks: the program's last output holds them
};

namespace {

bool is_complex_arg(const GraphArg& a, const std::vector<GraphNode>& nodes,
                    const std::vector<at::Tensor>* inputs) {
  switch (a.kind) {
    case GraphArg::Kind::kInput:
      return inputs && inputs->at(static_cast<size_t>(a.index)).defined() &&
             inputs->at(static_cast<size_t>(a.index)).is_complex();
    case GraphArg::Kind::kNode:
      return shlo::is_complex(nodes.at(a.index).out_types.at(a.output).dtype);
    case GraphArg::Kind::kList:
      for (const GraphArg& item : a.items) {
        if (is_complex_arg(item, nodes, inputs)) return true;
      }
      return false;
    case GraphArg::Kind::kConst:
      return a.constant.isComplexDouble();
    case GraphArg::Kind::kScalarInput:
    case GraphArg::Kind::kNone:
      return false;
  }
  return false;
}

// `inputs` null: the graph inputs' dtypes are not known yet (not checked).
void check_complex_support(const GraphNode& node, const std::vector<GraphNode>& nodes,
                           const std::vector<at::Tensor>* inputs) {
  if (node.descriptor->complex()) return;
  bool complex = false;
  for (const auto& t : node.out_types) complex |= shlo::is_complex(t.dtype);
  for (const GraphArg& a : node.args) complex |= is_complex_arg(a, nodes, inputs);
  TORCH_CHECK_NOT_IMPLEMENTED(!complex, "torchtpu: ", node.name, " has no complex lowering");
}

}  // namespace

int GraphExecutable::add_node(const std::string& op, const std::string& overload,
                              std::vector<GraphArg> args,
                              std::vector<lowering::TensorType> out_types) {
  auto handle = c10::Dispatcher::singleton().findOp({op, overload});
  TORCH_CHECK(handle.has_value(), "torchtpu: unknown operator ", op, ".", overload);
  GraphNode node{*handle,         full_name(handle->schema().operator_name()),
                 nullptr,         nullptr,
                 std::move(args), std::move(out_types)};
  node.lowering = lowering::find_lowering(node.name);
  if (!node.lowering) node.lowering = lowering::foreach_lowering(*handle);
  TORCH_CHECK_NOT_IMPLEMENTED(node.lowering != nullptr, "torchtpu: ", node.name,
                              " has no lowering");
  node.descriptor = lowering::find_op(node.name);
  check_complex_support(node, nodes_, nullptr);
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size()) - 1;
}

GraphStats GraphExecutable::stats() const {
  std::lock_guard<std::mutex> g(mutex_);
  return stats_;
}

std::shared_ptr<GraphExecutable::Entry> GraphExecutable::build(
    CallState& state, const std::vector<at::Tensor>& inputs, const std::string& why) {
  // As in eager mode: a complex operand of a lowering not known to handle complex declines the
  // graph (it then runs eagerly, where that op takes the CPU fallback). add_node has already
  // checked everything but the graph inputs' dtypes.
  for (const GraphNode& node : nodes_) check_complex_support(node, nodes_, &inputs);
  auto entry = std::make_shared<Entry>();
  shlo::ModuleBuilder module;
  auto& b = module.main();
  std::vector<std::optional<Value>> pvals(state.params.size());
  auto param_value = [&](int index) -> Value {
    auto& slot = pvals[static_cast<size_t>(index)];
    if (!slot) {
      const Param& p = state.params[static_cast<size_t>(index)];
      TensorType t =
          p.kind == Param::Kind::kStorage ? TensorType(p.dtype, p.dims) : TensorType(p.dtype, {});
      slot = b.add_argument(t);
      entry->used_params.push_back(index);
    }
    return *slot;
  };
  // An input view's offset is a runtime argument: views at other offsets reuse the program.
  auto view_of = [&](const ArgDesc& d) -> lowering::StridedView {
    if (d.offset_param < 0) return d.view;
    return view_with_offset(d, param_value(d.offset_param));
  };
  std::vector<std::optional<Value>> input_vals(inputs.size());
  auto read_input = [&](int i) -> Value {
    auto& slot = input_vals[static_cast<size_t>(i)];
    if (slot) return *slot;
    const ArgDesc& d = state.args[static_cast<size_t>(i)];
    const Param& p = state.params[static_cast<size_t>(d.param)];
    if (p.kind != Param::Kind::kStorage) {
      slot = param_value(d.param);
    } else if (!p.buffer) {
      slot = b.constant(0, TensorType(lowering::to_element_type(d.dtype), d.view.sizes));
    } else {
      Value base = param_value(d.param);
      ElementType want = lowering::to_element_type(d.dtype);
      base = lowering::reinterpret(b, base, want);
      slot = lowering::read_view(b, base, view_of(d));
    }
    return *slot;
  };
  std::optional<Value> rng;
  int rng_uses = 0;
  auto rng_source = [&]() -> Value {
    if (!rng) {
      rng = b.add_argument(TensorType(ElementType::kU64, {2}));
      entry->used_params.push_back(-1);
    }
    // Each random op of the graph draws from its own stream of the launch's (seed, offset).
    Value state2 = *rng;
    if (rng_uses > 0) {
      Value bump = b.concatenate(
          {b.constant_int(0, TensorType(ElementType::kU64, {1})),
           b.constant_int(int64_t{rng_uses} << 32, TensorType(ElementType::kU64, {1}))},
          0);
      state2 = b.add(state2, bump);
    }
    ++rng_uses;
    return state2;
  };

  std::vector<std::vector<Value>> env;
  std::map<int, Value> writes;         // input index -> new value
  lowering::CheckCollector collector;  // the device-side checks of every node
  auto value_of = [&](const GraphArg& a) -> Value {
    if (a.kind == GraphArg::Kind::kInput) {
      auto w = writes.find(a.index);
      return w != writes.end() ? w->second : read_input(a.index);
    }
    TORCH_CHECK(a.kind == GraphArg::Kind::kNode, "torchtpu: graph argument is not a tensor");
    return env.at(static_cast<size_t>(a.index)).at(static_cast<size_t>(a.output));
  };

  for (const GraphNode& node : nodes_) {
    const auto& sargs = node.op.schema().arguments();
    // The node's result types; an op that overwrites a graph input (copy_) is typed as it.
    std::vector<TensorType> want = node.out_types;
    int written = -1;
    if (node.descriptor->overwrites_self()) {
      TORCH_CHECK(node.args.at(0).kind == GraphArg::Kind::kInput, "torchtpu: ", node.name,
                  " into a graph intermediate is not supported");
      written = node.args[0].index;
      const ArgDesc& d = state.args[static_cast<size_t>(written)];
      want = {TensorType(lowering::to_element_type(d.dtype), d.view.sizes)};
    }
    std::vector<LArg> largs;
    for (size_t k = 0; k < node.args.size(); ++k) {
      const GraphArg& a = node.args[k];
      const c10::TypePtr& type = sargs.at(k).type();
      LArg la;
      if (k == 0 && written >= 0) {
        la.kind = LArg::Kind::kNone;  // overwritten, not read: no program argument for it
      } else if (is_generator_type(type)) {
        la.kind = LArg::Kind::kGenerator;
        la.value = rng_source();
      } else if (a.kind == GraphArg::Kind::kInput || a.kind == GraphArg::Kind::kNode) {
        la.kind = LArg::Kind::kTensor;
        la.value = value_of(a);
      } else if (a.kind == GraphArg::Kind::kList) {
        la.kind = LArg::Kind::kTensorList;
        for (const GraphArg& item : a.items) {
          if (item.kind == GraphArg::Kind::kNone) {
            la.values.push_back(std::nullopt);
          } else {
            la.values.push_back(value_of(item));
          }
        }
      } else if (a.kind == GraphArg::Kind::kScalarInput) {
        la.kind = LArg::Kind::kScalar;
        la.value = b.convert(read_input(a.index),
                             scalar_element_type(a.constant.toScalar(), state.any_f64));
        la.ivalue = a.constant;
      } else if (a.kind == GraphArg::Kind::kConst && a.constant.isScalar() &&
                 (is_scalar_type(type) || type->kind() == c10::TypeKind::TensorType ||
                  type->str() == "Tensor?")) {
        // Dynamo specialized this Python number into the graph: a constant of its type.
        c10::Scalar s = a.constant.toScalar();
        TensorType t(scalar_element_type(s, state.any_f64), {});
        la.kind = LArg::Kind::kScalar;
        if (s.isComplex()) {
          // A complex literal (`x * 0.5j`): built from its two parts, which builder constants
          // (real splats) cannot express in one.
          c10::complex<double> c = s.toComplexDouble();
          TensorType part(shlo::complex_component(t.dtype), {});
          la.value = b.op("stablehlo.complex",
                          {b.constant(c.real(), part), b.constant(c.imag(), part)}, t);
        } else {
          la.value =
              s.isIntegral(true) ? b.constant_int(s.toLong(), t) : b.constant(s.toDouble(), t);
        }
        la.ivalue = a.constant;
      } else if (a.kind == GraphArg::Kind::kConst) {
        la.kind = LArg::Kind::kConst;
        la.ivalue = a.constant;
      } else {
        la.kind = LArg::Kind::kNone;
      }
      largs.push_back(std::move(la));
    }
    lowering::LoweringContext ctx(b, node.op.schema(), std::move(largs), want,
                                  runtime::get().platform());
    ctx.set_rng_source(rng_source);
    std::vector<Value> results;
    try {
      results = (*node.lowering)(ctx);
    } catch (const c10::NotImplementedError&) {
      throw;
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "torchtpu: lowering ", node.name, " in graph ", name_,
                  " failed: ", e.what_without_backtrace());
    }
    TORCH_CHECK(results.size() == want.size(), "torchtpu: lowering of ", node.name, " returned ",
                results.size(), " values, the graph expects ", want.size());
    for (size_t k = 0; k < results.size(); ++k) {
      TORCH_CHECK(results[k].type == want[k], "torchtpu: lowering of ", node.name, " produced ",
                  results[k].type.str(), " but the graph expects ", want[k].str());
    }
    // The input's storage receives the value when the program finishes.
    if (written >= 0) writes[written] = results.at(0);
    env.push_back(std::move(results));
  }

  std::vector<Value> program_outputs;
  for (const GraphArg& out : outputs_) {
    if (out.kind == GraphArg::Kind::kNode) {
      Entry::Out o;
      o.index = entry->num_new++;
      Value v = value_of(out);
      o.dims = v.shape();
      o.element_type = v.dtype();
      o.dtype = lowering::to_scalar_type(v.dtype());
      entry->outs.push_back(o);
      entry->results.emplace_back(0, o.index);
      program_outputs.push_back(v);
    } else if (out.kind == GraphArg::Kind::kInput) {
      entry->results.emplace_back(1, out.index);
    } else {
      entry->results.emplace_back(2, 0);
    }
  }
  for (auto& [i, value] : writes) {
    const ArgDesc& d = state.args[static_cast<size_t>(i)];
    const Param& p = state.params[static_cast<size_t>(d.param)];
    if (p.kind != Param::Kind::kStorage) {
      const at::Tensor& cpu = inputs[static_cast<size_t>(i)];
      Entry::Out o;
      o.to_cpu_input = true;
      o.index = i;
      o.dtype = cpu.scalar_type();
      o.element_type = lowering::to_element_type(o.dtype);
      o.dims = cpu.sizes().vec();
      entry->outs.push_back(o);
      program_outputs.push_back(lowering::coerce(b, value, TensorType(o.element_type, o.dims)));
      continue;
    }
    Entry::Out o;
    o.to_storage = true;
    o.index = d.param;
    std::optional<Value> base;
    if (p.buffer) base = param_value(d.param);
    Value stored = lowering::write_storage(b, base, p.dims, p.dtype, view_of(d), value);
    o.dims = stored.shape();
    o.element_type = stored.dtype();
    o.dtype = lowering::to_scalar_type(stored.dtype());
    // Donate the old buffer when it is an argument of the same type: XLA updates in place.
    if (donation_enabled() && pvals[static_cast<size_t>(d.param)] &&
        pvals[static_cast<size_t>(d.param)]->type == stored.type) {
      for (size_t k = 0; k < entry->used_params.size(); ++k) {
        if (entry->used_params[k] == d.param) {
          b.set_argument_attrs(
              k, "tf.aliasing_output = " + std::to_string(program_outputs.size()) + " : i32");
        }
      }
    }
    entry->outs.push_back(o);
    program_outputs.push_back(stored);
  }
  entry->checks = append_check_output(b, collector.take(), program_outputs);
  module.finish(program_outputs);
  uint64_t n = 0;
  for (const auto& node : nodes_) {
    for (const auto& t : node.out_types) n += static_cast<uint64_t>(t.numel());
  }
  entry->rng_numel = rng_uses > 0 ? n : 0;
  std::string signature = "graph " + name_ + "(";
  for (const std::string& d : describe_inputs(inputs)) {
    signature += (signature.back() == '(' ? "" : ", ") + d;
  }
  signature += ")";
  auto start = std::chrono::steady_clock::now();
  entry->program = runtime::compile_program(module.str(), signature, why);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> g(mutex_);
  stats_.compiles++;
  stats_.compile_seconds += secs;
  return entry;
}

std::vector<c10::IValue> GraphExecutable::run(const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == num_inputs_, "torchtpu: graph ", name_,
              " expects ", num_inputs_, " inputs, got ", inputs.size());
  auto start = std::chrono::steady_clock::now();
  CallState state;
  state.args.resize(inputs.size());
  for (const at::Tensor& t : inputs) {
    if (t.defined() && t.scalar_type() == c10::kDouble) state.any_f64 = true;
  }
  Scanner scanner(state);
  for (size_t i = 0; i < inputs.size(); ++i) scanner.tensor(inputs[i], state.args[i]);
  bool hit = false;
  std::shared_ptr<Entry> entry = cache_.get_or_build(
      state.key,
      [&] {
        runtime::metrics().cache_misses++;
        return build(state, inputs, misses_.explain_and_record(name_, describe_inputs(inputs)));
      },
      &hit);
  if (hit) runtime::metrics().cache_hits++;
  int dev = state.device >= 0 ? state.device : device::current_device();
  torch::jit::Stack no_stack;
  std::vector<device::BufferPtr> outputs =
      launch_program(*entry->program, entry->used_params, state, no_stack, entry->rng_numel, dev);
  // Before any write lands: under TPU_LAUNCH_BLOCKING=1 a failed check raises here.
  if (entry->checks) runtime::defer_checks(dev, std::move(outputs.back()), entry->checks);
  std::vector<at::Tensor> fresh(static_cast<size_t>(entry->num_new));
  for (size_t k = 0; k < entry->outs.size(); ++k) {
    const Entry::Out& o = entry->outs[k];
    if (o.to_storage) {
      Param& p = state.params[static_cast<size_t>(o.index)];
      static_cast<device::StorageHandle*>(p.storage->data_ptr().get_context())
          ->set_buffer(std::move(outputs[k]), o.dims, o.element_type);
    } else if (o.to_cpu_input) {
      // Waits for the program: the CPU tensor must hold its new value when run() returns.
      at::Tensor cpu = inputs[static_cast<size_t>(o.index)];
      cpu.copy_(wrap_buffer(std::move(outputs[k]), o.dims, o.dtype, dev));
    } else {
      fresh[static_cast<size_t>(o.index)] =
          wrap_buffer(std::move(outputs[k]), o.dims, o.dtype, dev);
    }
  }
  std::vector<c10::IValue> results;
  for (const auto& [kind, index] : entry->results) {
    if (kind == 0) {
      results.emplace_back(fresh[static_cast<size_t>(index)]);
    } else if (kind == 1) {
      results.emplace_back(inputs[static_cast<size_t>(index)]);
    } else {
      results.emplace_back();
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> g(mutex_);
  stats_.executions++;
  stats_.launch_seconds += secs;
  return results;
}

}  // namespace torchtpu::aten
