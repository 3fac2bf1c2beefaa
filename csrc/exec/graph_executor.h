// A torch.compile graph (functional ATen FX graph from AOTAutograd) lowered through the same
// lowering table as eager ops into ONE program per input signature.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/program.h"
#include "lowering/lowering.h"
#include "runtime/program_cache.h"

namespace torchtpu::exec {

// A graph's nodes and arguments are the engine's (exec/program.h): kInput is graph input
// `index`, whose slot is CallState.args[index].
using GraphArg = exec::NodeArg;
using GraphNode = exec::Node;

struct GraphStats {
  int64_t compiles = 0;
  double compile_seconds = 0;
  int64_t executions = 0;
  double launch_seconds = 0;
};

class GraphExecutable {
 public:
  GraphExecutable(std::string name, int num_inputs);
  // Returns the node index. Throws c10::NotImplementedError when the op has no lowering.
  int add_node(const std::string& op, const std::string& overload, std::vector<GraphArg> args,
               std::vector<lowering::TensorType> out_types);
  void set_outputs(std::vector<GraphArg> outputs);
  const c10::FunctionSchema& schema_of(int node) const { return *spec_.nodes.at(node).schema; }
  // Runs the graph on tpu tensors; compiles on the first call of each input signature.
  std::vector<c10::IValue> run(const std::vector<at::Tensor>& inputs);
  // Compiles (or loads from the memory and disk caches) the program for these inputs' signature
  // without running it, so a service compiles every signature it will meet at startup, from
  // several threads at once. True when this call built it.
  bool prepare(const std::vector<at::Tensor>& inputs);
  const std::string& name() const { return name_; }
  GraphStats stats() const;

 private:
  using Entry = exec::ProgramEntry;
  // A signature missed the cache: its recipe from an earlier process, or lowered and compiled.
  std::shared_ptr<Entry> build(struct CallState& state, const std::vector<at::Tensor>& inputs);

  std::string name_;
  int num_inputs_;
  exec::ProgramSpec spec_;  // returns: the outputs that are nodes'
  // Per graph output: (0, k) the spec's k-th return, (1, i) graph input i itself, (2, -) None.
  std::vector<std::pair<int, int>> results_;
  mutable std::mutex mutex_;
  runtime::ProgramCache<Entry> cache_;
  std::string structure_;     // exec::structure_hash of spec_, made at the first miss
  bool collectives_ = false;  // a node is a collective (lowering::kCollective)
  GraphStats stats_;
};

}  // namespace torchtpu::exec
