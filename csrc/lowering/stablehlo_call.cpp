// torchtpu::stablehlo_call(Tensor[] args, str module) -> Tensor[]: a user's StableHLO module
// (torchtpu.stablehlo_op, torchtpu.jax_op) called from the program being built. Its functions
// join the program under names of their own and @main calls the entry function, so in a
// compiled graph the module is inlined into the graph's one program, and eagerly it is one
// small cached program like any op.
#include "lowering/stablehlo_call.h"

#include <c10/util/Exception.h>

#include <functional>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "lowering/lowering.h"

namespace torchtpu::lowering {

std::shared_ptr<const shlo::UserModule> user_module(const std::string& text) {
  static std::mutex m;
  static std::unordered_map<std::string, std::shared_ptr<const shlo::UserModule>> parsed;
  std::lock_guard<std::mutex> g(m);
  auto it = parsed.find(text);
  if (it != parsed.end()) return it->second;
  std::ostringstream prefix;
  prefix << "user_" << std::hex << std::hash<std::string>{}(text);
  std::shared_ptr<const shlo::UserModule> module;
  try {
    module = std::make_shared<shlo::UserModule>(shlo::parse_user_module(text, prefix.str()));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "torchtpu.stablehlo_op: ", e.what());
  }
  parsed.emplace(text, module);
  return module;
}

std::string describe_types(const std::vector<TensorType>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s + ")";
}

namespace {

std::vector<Value> lower_stablehlo_call(LoweringContext& ctx) {
  auto module = user_module(ctx.arg(1).ivalue.toStringRef());
  std::vector<Value> args = ctx.tensor_list(0);
  std::vector<TensorType> given;
  for (const Value& v : args) given.push_back(v.type);
  TORCH_CHECK_VALUE(given == module->arg_types, "torchtpu.stablehlo_op: the module takes ",
                    describe_types(module->arg_types), " but was given ", describe_types(given));
  shlo::add_module_functions(module->entry, module->functions);
  return ctx.b.op_multi("func.call", args, module->result_types, "callee = @" + module->entry);
}

TORCHTPU_LOWERING("torchtpu::stablehlo_call", lower_stablehlo_call);

}  // namespace
}  // namespace torchtpu::lowering
