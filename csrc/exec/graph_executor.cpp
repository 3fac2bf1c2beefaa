#include "exec/graph_executor.h"

#include <c10/util/Exception.h>

#include <chrono>

#include "config/config.h"
#include "device/current_device.h"
#include "exec/call_state.h"
#include "exec/op_plan.h"
#include "exec/program.h"
#include "exec/recipe.h"
#include "exec/signature_of.h"
#include "runtime/compile.h"
#include "runtime/metrics.h"

namespace torchtpu::exec {
namespace {

bool donation_enabled() {
  static const bool on = config::flag("TORCHTPU_DONATE", true);
  return on;
}

// Graph signatures by family (a graph and its per-size specializations, "g3" and "g3.1"), for
// miss explanations across GraphExecutables.
runtime::SignatureIndex& graph_signatures() {
  static runtime::SignatureIndex* index = new runtime::SignatureIndex();
  return *index;
}

std::string family_of(const std::string& name) { return name.substr(0, name.find('.')); }

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

// Whether a recorded entry's new tensors are among the graph's `num_returns` returns.
bool fits_returns(const exec::ProgramEntry& e, size_t num_returns) {
  for (const exec::OutputSink& o : e.outputs) {
    if (!o.to_storage && !o.to_cpu_input && static_cast<size_t>(o.index) >= num_returns) {
      return false;
    }
  }
  return true;
}

}  // namespace

GraphExecutable::GraphExecutable(std::string name, int num_inputs)
    : name_(std::move(name)), num_inputs_(num_inputs) {
  spec_.name = "graph " + name_;
  spec_.graph = name_;
  spec_.rng_streams = true;  // each random node draws its own stream
  spec_.donate = donation_enabled();
}

int GraphExecutable::add_node(const std::string& op, const std::string& overload,
                              std::vector<GraphArg> args,
                              std::vector<lowering::TensorType> out_types) {
  auto handle = c10::Dispatcher::singleton().findOp({op, overload});
  TORCH_CHECK(handle.has_value(), "torchtpu: unknown operator ", op, ".", overload);
  GraphNode node;
  node.name = full_name(handle->schema().operator_name());
  node.schema = &handle->schema();
  node.lowering = lowering::find_lowering(node.name);
  if (!node.lowering) node.lowering = lowering::foreach_lowering(*handle);
  TORCH_CHECK_NOT_IMPLEMENTED(node.lowering != nullptr, "torchtpu: ", node.name,
                              " has no lowering");
  node.descriptor = lowering::find_op(node.name);
  node.overwrites_self = node.descriptor && node.descriptor->overwrites_self();
  node.args = std::move(args);
  node.out_types = std::move(out_types);
  check_complex_support(node, spec_.nodes, nullptr);
  collectives_ = collectives_ || (node.descriptor && node.descriptor->collective());
  spec_.nodes.push_back(std::move(node));
  return static_cast<int>(spec_.nodes.size()) - 1;
}

void GraphExecutable::set_outputs(std::vector<GraphArg> outputs) {
  spec_.returns.clear();
  results_.clear();
  for (const GraphArg& out : outputs) {
    if (out.kind == GraphArg::Kind::kNode) {
      results_.emplace_back(0, static_cast<int>(spec_.returns.size()));
      spec_.returns.push_back(out);
    } else {
      results_.emplace_back(out.kind == GraphArg::Kind::kInput ? 1 : 2, out.index);
    }
  }
}

GraphStats GraphExecutable::stats() const {
  std::lock_guard<std::mutex> g(mutex_);
  return stats_;
}

std::shared_ptr<GraphExecutable::Entry> GraphExecutable::build(
    CallState& state, const std::vector<at::Tensor>& inputs) {
  runtime::metrics().cache_misses++;
  std::string structure;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (structure_.empty()) structure_ = exec::structure_hash(spec_);
    structure = structure_;
  }
  auto sig = std::make_shared<runtime::Signature>(graph_signature(structure, name_, state, inputs));
  // Recorded by an earlier process (or another graph of this one with the same structure): the
  // executable by its signature, without lowering, printing or hashing the module. Not for a
  // graph with collectives, whose program depends on its process groups, which another process
  // names alike for other ranks and devices.
  const std::string recipe =
      collectives_ ? std::string() : exec::recipe_key("graph|" + structure, state.key);
  auto entry = std::make_shared<Entry>();
  if (!recipe.empty() &&
      exec::load_entry(recipe, sig->describe(), *entry, state.params.size(), inputs.size()) &&
      fits_returns(*entry, spec_.returns.size())) {
    graph_signatures().explain_miss(family_of(name_), *sig);  // a recompile all the same
    entry->signature = sig;
    graph_signatures().add(family_of(name_), sig);
    return entry;
  }
  // As in eager mode: a complex operand of a lowering not known to handle complex declines the
  // graph (it then runs eagerly, where that op takes the CPU fallback). add_node has already
  // checked everything but the graph inputs' dtypes.
  for (const GraphNode& node : spec_.nodes) check_complex_support(node, spec_.nodes, &inputs);
  entry = std::make_shared<Entry>();
  std::string text = exec::build(spec_, state, *entry);
  std::string why = graph_signatures().explain_miss(family_of(name_), *sig);
  auto start = std::chrono::steady_clock::now();
  entry->program =
      runtime::compile_program(text, sig->describe(), why, exec::compile_options_of(*entry));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!recipe.empty()) {
    runtime::RecipeWriter w;
    exec::write_entry(w, *entry);
    runtime::store_recipe(recipe, *entry->program, w.bytes());
  }
  entry->signature = sig;
  graph_signatures().add(family_of(name_), sig);
  std::lock_guard<std::mutex> g(mutex_);
  stats_.compiles++;
  stats_.compile_seconds += secs;
  return entry;
}

namespace {

// The call's cache key. A graph with collectives keys on the calling rank's device too.
void scan_inputs(const std::string& name, int num_inputs, bool collectives,
                 const std::vector<at::Tensor>& inputs, CallState& state) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == num_inputs, "torchtpu: graph ", name, " expects ",
              num_inputs, " inputs, got ", inputs.size());
  state.args.resize(inputs.size());
  for (const at::Tensor& t : inputs) {
    if (t.defined() && t.scalar_type() == c10::kDouble) state.any_f64 = true;
  }
  Scanner scanner(state);
  for (size_t i = 0; i < inputs.size(); ++i) scanner.tensor(inputs[i], state.args[i]);
  // As in eager mode (Scanner::scan): the settings are structure, the graph recompiles once.
  state.numerics = current_numerics();
  state.key.push_back(state.numerics.tag());
  if (collectives) {
    // Its groups, and so its replicas' devices, are those of the rank on this device.
    const int dev = state.device >= 0 ? state.device : device::current_device();
    state.key += "|collectives on tpu:" + std::to_string(dev);
  }
}

}  // namespace

bool GraphExecutable::prepare(const std::vector<at::Tensor>& inputs) {
  CallState state;
  scan_inputs(name_, num_inputs_, collectives_, inputs, state);
  bool hit = false;
  cache_.get_or_build(
      state.key, [&] { return build(state, inputs); }, &hit);
  return !hit;
}

std::vector<c10::IValue> GraphExecutable::run(const std::vector<at::Tensor>& inputs) {
  auto start = std::chrono::steady_clock::now();
  CallState state;
  scan_inputs(name_, num_inputs_, collectives_, inputs, state);
  bool hit = false;
  std::shared_ptr<Entry> entry = cache_.get_or_build(
      state.key, [&] { return build(state, inputs); }, &hit);
  if (hit) runtime::metrics().cache_hits++;
  c10::SmallVector<at::Tensor, 4> fresh =
      exec::launch(*entry, state, torch::jit::Stack(), inputs, spec_.returns.size());
  std::vector<c10::IValue> results;
  for (const auto& [kind, index] : results_) {
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

}  // namespace torchtpu::exec
