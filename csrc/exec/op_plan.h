// How an aten operator reaching the tpu backend maps onto the lowering table: its own entry,
// or its functional form (in-place `add_` and out= `add.out` both lower `add.Tensor` and the
// kernel writes the result back into the mutated arguments).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

#include "lowering/lowering.h"

namespace torchtpu::exec {

enum class Variant { kFunctional, kInplace, kOut };

struct OpPlan {
  std::string called_name;                         // "aten::add_.Tensor"
  std::string lowering_name;                       // "aten::add.Tensor"
  const lowering::LoweringFn* lowering = nullptr;  // null: not lowered, use the CPU fallback
  // The lowered op's descriptor (its facts: complex support, ...); set with `lowering`.
  const lowering::OpDescriptor* descriptor = nullptr;
  Variant variant = Variant::kFunctional;
  // The lowered op's schema; its arguments are taken from the called op's stack through
  // `arg_map` (functional arg i = called arg arg_map[i]).
  std::optional<c10::OperatorHandle> lowered_op;
  std::vector<size_t> arg_map;
  // Called-op arguments written by the op, in return order (self for in-place, outs for out=).
  std::vector<size_t> mutated_args;
  // How many values the called op returns (in-place/out= ops return their first mutated
  // arguments; `_fused_adam_` and `_foreach_add_` return nothing).
  size_t called_returns = 0;
};

// Cached per operator; thread-safe.
const OpPlan& plan_for(const c10::OperatorHandle& op);
std::string full_name(const c10::OperatorName& name);

}  // namespace torchtpu::exec
