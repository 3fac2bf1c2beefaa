// A torch.compile graph (functional ATen FX graph from AOTAutograd) lowered through the same
// lowering table as eager ops into ONE program per input signature.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "lowering/lowering.h"
#include "runtime/miss_log.h"
#include "runtime/program_cache.h"

namespace torchtpu::aten {

struct GraphArg {
  // kScalarInput: a Python number the compiled function takes as an argument (Dynamo made it a
  // symbolic int): a graph input holding a 0-d CPU tensor, read by the node as a runtime
  // Scalar, so a new value never recompiles; `constant` holds a sample of its Python type.
  enum class Kind { kInput, kNode, kList, kConst, kScalarInput, kNone };
  Kind kind = Kind::kNone;
  int index = 0;                // kInput, kScalarInput: graph input; kNode: node
  int output = 0;               // kNode: which of the node's outputs
  std::vector<GraphArg> items;  // kList
  c10::IValue constant;         // kConst; kScalarInput: a sample value
};

struct GraphNode {
  c10::OperatorHandle op;
  std::string name;  // "aten::add.Tensor"
  const lowering::LoweringFn* lowering = nullptr;
  const lowering::OpDescriptor* descriptor = nullptr;  // its facts; null for copy_
  std::vector<GraphArg> args;                          // in schema order
  std::vector<lowering::TensorType> out_types;
};

struct GraphStats {
  int64_t compiles = 0;
  double compile_seconds = 0;
  int64_t executions = 0;
  double launch_seconds = 0;
};

class GraphExecutable {
 public:
  GraphExecutable(std::string name, int num_inputs)
      : name_(std::move(name)), num_inputs_(num_inputs) {}
  // Returns the node index. Throws c10::NotImplementedError when the op has no lowering.
  int add_node(const std::string& op, const std::string& overload, std::vector<GraphArg> args,
               std::vector<lowering::TensorType> out_types);
  void set_outputs(std::vector<GraphArg> outputs) { outputs_ = std::move(outputs); }
  const c10::FunctionSchema& schema_of(int node) const { return nodes_.at(node).op.schema(); }
  // Runs the graph on tpu tensors; compiles on the first call of each input signature.
  std::vector<c10::IValue> run(const std::vector<at::Tensor>& inputs);
  const std::string& name() const { return name_; }
  GraphStats stats() const;

 private:
  struct Entry;
  std::shared_ptr<Entry> build(struct CallState& state, const std::vector<at::Tensor>& inputs,
                               const std::string& why);

  std::string name_;
  int num_inputs_;
  std::vector<GraphNode> nodes_;
  std::vector<GraphArg> outputs_;
  mutable std::mutex mutex_;
  runtime::ProgramCache<Entry> cache_;
  runtime::MissExplainer misses_;
  GraphStats stats_;
};

}  // namespace torchtpu::aten
