// The one program engine's build and landing side. Eager ops (exec/executor.cpp) and compiled
// graphs (exec/graph_executor.cpp) describe what to compute as a ProgramSpec over the slots of a
// CallState (storage views with runtime offsets, runtime scalars, CPU 0-d tensors, generators):
// an eager op is a one-node spec. build() turns any spec into one module, and owns what both
// need: program arguments, reading views, the default generator's streams, writes into storages
// (donating old buffers where asked), the outputs' description and the device-side checks.
// launch() runs a built program and lands its outputs, for both.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/call_state.h"
#include "lowering/lowering.h"
#include "runtime/collective_world.h"
#include "runtime/compile.h"
#include "runtime/device_checks.h"
#include "runtime/signature.h"
#include "stablehlo/types.h"

namespace torchtpu::exec {

// What one program output becomes after a launch.
struct OutputSink {
  bool to_storage = false;    // swapped into the storage of CallState.params[index]
  bool to_cpu_input = false;  // copied into graph input `index`, a CPU tensor the graph mutates
  int index = 0;              // else: the index-th new tensor
  std::vector<int64_t> dims;  // the buffer's shape (device::flat_buffers: 1-D)
  c10::ScalarType dtype = c10::kFloat;
  shlo::ElementType element_type = shlo::ElementType::kF32;
  // A new tensor's sizes, and its strides when they are not contiguous's (a memory format such
  // as channels_last, stored in physical order).
  std::vector<int64_t> sizes, strides;
};

// A built program: how its arguments are fed and where its outputs land.
struct ProgramEntry {
  std::shared_ptr<runtime::Program> program;
  // Program argument k is CallState.params[used_params[k]]; -1: the device's default generator.
  std::vector<int> used_params;
  std::vector<OutputSink> outputs;
  uint64_t rng_numel = 0;      // how far a launch advances the generators it draws from
  runtime::CheckSpecs checks;  // device-side checks: the program's last output holds them
  // Per check, the spec node whose lowering made it (fused eager names that op's caller).
  std::vector<int> check_nodes;
  // What it was built for, typed: a later miss of the same op or graph is explained against it
  // while it is cached (runtime::SignatureIndex holds it weakly).
  std::shared_ptr<const runtime::Signature> signature;
  // A program with collectives (lowering::kCollective nodes): the devices its replicas run on,
  // compiled with pjrt::replicated_compile_options(world->devices) and launched with a launch id
  // from runtime::coordinate_launch; null for a one-device program. `collectives`: how many
  // collective ops one launch runs (metrics: collectives_in_program).
  std::shared_ptr<const runtime::ReplicaWorld> world;
  int collectives = 0;
  // Built under torch.use_deterministic_algorithms(True): compiled with the platform's
  // deterministic-ops option, if it needs one (runtime/determinism.h).
  bool deterministic = false;
};

// One argument of a node, in schema order.
struct NodeArg {
  // kInput: a slot, CallState.args[index] (a graph input, or an eager call's argument), with
  // `constant` the call's value (None for a graph input). kScalarInput: a graph input holding a
  // 0-d CPU tensor that the node reads as a runtime Scalar (a Python number Dynamo made
  // symbolic), `constant` a sample of its Python type. kNode: output `output` of node `index`.
  // kConst: a value of the graph; a number where a Scalar or Tensor goes becomes a constant.
  enum class Kind { kInput, kNode, kList, kConst, kScalarInput, kNone };
  Kind kind = Kind::kNone;
  int index = 0;
  int output = 0;
  std::vector<NodeArg> items;  // kList
  c10::IValue constant;
};

// One lowered op of a program.
struct Node {
  std::string name;  // "aten::add.Tensor"
  const c10::FunctionSchema* schema = nullptr;
  const lowering::LoweringFn* lowering = nullptr;
  const lowering::OpDescriptor* descriptor = nullptr;
  std::vector<shlo::TensorType> out_types;
  // The node replaces its first argument, a slot, without reading it (a graph's copy_): later
  // nodes read the new value and the slot's storage receives it.
  bool overwrites_self = false;
  std::vector<NodeArg> args;
  // Results written into slots' views as soon as the node is lowered: later nodes read them
  // through the storage, as eager ops see an earlier op's write (a fused eager region, whose
  // functional results are writes into the new tensors' storages). (slot, result index)
  std::vector<std::pair<const ArgDesc*, int>> writes;
  // >= 0: the parameter (a Generator slot's kind) whose state this node's lowering draws from
  // instead of the device's default generator; fused eager draws it when the op is recorded, as
  // a strict eager launch would.
  int rng_param = -1;
};

// A new tensor's layout when it is not contiguous: stored with its dims in `perm` order
// (outermost in memory first) and returned with `strides`; both empty: contiguous.
struct Layout {
  std::vector<int64_t> perm, strides;
};

// What a program computes: an eager op is one node whose arguments are all slots; a compiled
// graph is many. Everything a node reads is a slot, another node's output or a constant.
struct ProgramSpec {
  std::string name;   // the op, for errors
  std::string graph;  // a compiled graph's name (errors name it and the node); empty: eager
  std::vector<Node> nodes;
  // New tensors, kNode; `layouts[i]` (optional) the layout of returns[i].
  std::vector<NodeArg> returns;
  std::vector<Layout> layouts;
  // Results written into slots' views: an eager in-place or out= op's mutated arguments.
  std::vector<std::pair<const ArgDesc*, NodeArg>> writes;
  bool rng_streams = false;  // each random node draws its own stream of the launch's state
  bool donate = false;       // written storages donate their old buffers
  // Per parameter, true for a storage nobody reads after the program (a fused eager region's
  // temporaries): its writes stay inside the program, no output. Empty: every write is output.
  std::vector<bool> discard;
  // The replicas of a program with collectives. Null: planned from the process groups its
  // collective nodes name (runtime::plan_world), as compiled graphs do; the eager backend gives
  // its own (a group's devices, or the two ranks of a send/recv).
  std::shared_ptr<const runtime::ReplicaWorld> world;
};

// Whether a spec has collective nodes (lowering::kCollective), whose program needs a world.
bool has_collectives(const ProgramSpec& spec);
// The compile options of a built entry: replicated over its world, with XLA's deterministic-ops
// option where it was built deterministic and the platform needs it, or the runtime's default
// ("" for compile_program).
std::string compile_options_of(const ProgramEntry& e);

// Builds the spec's module over `state`'s slots: fills `e` but its program, returns the text.
std::string build(const ProgramSpec& spec, CallState& state, ProgramEntry& e);

// Launches `e`'s program over `state`'s parameters (launch_program; generators named on
// `stack`) on the call's device, and lands its outputs: a storage output swaps its storage's
// buffer (every alias sees the write), a written CPU input (graph input `index` of `inputs`)
// receives its value, and the `num_returns` new tensors come back in order. A program with
// collectives first meets its other replicas (runtime::coordinate_launch), which raises, before
// anything is launched, when they do not all launch it.
// `world`, when given, is the one to meet on (the calling group's: a cached program serves every
// group with its devices), else the program's own.
// With `call_sizes` (a size-generic program, exec/generic.h), the new tensors take those sizes
// and `call_strides` (empty: contiguous) instead of the ones `e` was built for.
c10::SmallVector<at::Tensor, 4> launch(const ProgramEntry& e, CallState& state,
                                       const torch::jit::Stack& stack,
                                       const std::vector<at::Tensor>& inputs, size_t num_returns,
                                       const runtime::ReplicaWorld* world = nullptr,
                                       const std::vector<int64_t>* call_sizes = nullptr,
                                       const std::vector<int64_t>* call_strides = nullptr);

}  // namespace torchtpu::exec
