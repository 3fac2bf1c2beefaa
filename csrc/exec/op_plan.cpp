#include "exec/op_plan.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace torchtpu::exec {
namespace {

bool is_write(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

bool same_argument(const c10::Argument& x, const c10::Argument& y) {
  return x.name() == y.name() && x.type()->str() == y.type()->str();
}

// Overloads of every operator, by base name, gathered once on first use.
const std::unordered_map<std::string, std::vector<c10::OperatorName>>& overloads() {
  static const auto* map = [] {
    auto* m = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
      (*m)[name.name].push_back(name);
    }
    return m;
  }();
  return *map;
}

// In-place _foreach_* ops (optimizer steps: `_foreach_add_(state_steps, 1)`) run as ONE
// program over the whole list, like in compiled graphs. Not those taking a Scalar[]: its values
// would be structural (a recompile per new value), where the per-tensor composite passes each
// as a runtime scalar.
bool eager_foreach(const c10::FunctionSchema& functional) {
  if (functional.name().rfind("aten::_foreach_", 0) != 0) return false;
  for (const auto& a : functional.arguments()) {
    if (a.type()->str() == "Scalar[]") return false;
  }
  return true;
}

void try_functional(OpPlan& plan, const c10::FunctionSchema& schema) {
  const auto& args = schema.arguments();
  std::vector<size_t> kept;  // called args that the functional form also takes
  for (size_t i = 0; i < args.size(); ++i) {
    bool out_arg = is_write(args[i]) && args[i].kwarg_only();
    if (out_arg) {
      plan.mutated_args.push_back(i);
    } else {
      kept.push_back(i);
    }
  }
  std::string base = schema.name();
  if (plan.mutated_args.empty()) {
    // In-place: "aten::add_" (or "aten::__iand__") writes self and lowers "aten::add" (or
    // "aten::__and__") with the same argument names and types.
    if (base.empty() || base.back() != '_' || args.empty() || !is_write(args[0])) return;
    if (base.rfind("aten::__i", 0) == 0) {
      base = "aten::__" + base.substr(9);
    } else {
      base.pop_back();
    }
    plan.variant = Variant::kInplace;
    // Usually just self; fused ops (_fused_adam_, _amp_update_scale_) write several arguments,
    // and their functional form returns one result per written argument, in order.
    plan.mutated_args.clear();
    kept.clear();
    for (size_t i = 0; i < args.size(); ++i) {
      kept.push_back(i);
      if (is_write(args[i])) plan.mutated_args.push_back(i);
    }
  } else {
    plan.variant = Variant::kOut;
  }
  auto it = overloads().find(base);
  if (it == overloads().end()) return;
  // The overload of the same name first: it is the intended match when several fit.
  std::vector<c10::OperatorName> candidates = it->second;
  std::stable_partition(candidates.begin(), candidates.end(), [&](const c10::OperatorName& c) {
    return c.overload_name == schema.overload_name();
  });
  for (const c10::OperatorName& cand : candidates) {
    auto handle = c10::Dispatcher::singleton().findOp(cand);
    if (!handle) continue;
    const auto& cargs = handle->schema().arguments();
    bool alias_free = true;
    for (const auto& a : cargs) alias_free &= !is_write(a);
    if (!alias_free || cargs.size() != kept.size()) continue;
    bool match = true;
    for (size_t i = 0; i < kept.size() && match; ++i) {
      match = same_argument(cargs[i], args[kept[i]]);
    }
    if (!match || handle->schema().returns().size() != plan.mutated_args.size()) continue;
    std::string name = full_name(cand);
    const auto* fn = lowering::find_eager_lowering(name);
    if (!fn && plan.variant == Variant::kInplace && eager_foreach(handle->schema())) {
      fn = lowering::foreach_lowering(*handle);
    }
    if (fn) {
      plan.lowering = fn;
      plan.descriptor = lowering::find_op(name);
      plan.lowering_name = name;
      plan.lowered_op = handle;
      plan.arg_map = kept;
      return;
    }
  }
}

OpPlan make_plan(const c10::OperatorHandle& op) {
  OpPlan plan;
  const auto& schema = op.schema();
  plan.called_name = full_name(schema.operator_name());
  plan.called_returns = schema.returns().size();
  // The exact name first: covers functional ops and out=/in-place ops lowered as themselves.
  if (const auto* d = lowering::find_eager_op(plan.called_name)) {
    plan.lowering = &d->fn;
    plan.descriptor = d;
    plan.lowering_name = plan.called_name;
    plan.lowered_op = op;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      plan.arg_map.push_back(i);
      if (is_write(schema.arguments()[i])) plan.mutated_args.push_back(i);
    }
    if (!plan.mutated_args.empty()) {
      plan.variant =
          schema.arguments()[plan.mutated_args[0]].kwarg_only() ? Variant::kOut : Variant::kInplace;
    }
    return plan;
  }
  try_functional(plan, schema);
  if (!plan.lowering) {
    plan.variant = Variant::kFunctional;
    plan.mutated_args.clear();
  }
  return plan;
}

}  // namespace

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

namespace {

const OpPlan& shared_plan_for(const c10::OperatorHandle& op, const void* key) {
  static std::mutex m;
  static std::unordered_map<const void*, std::unique_ptr<OpPlan>> plans;
  std::lock_guard<std::mutex> g(m);
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;
  auto plan = std::make_unique<OpPlan>(make_plan(op));
  return *plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

const OpPlan& plan_for(const c10::OperatorHandle& op) {
  // Every eager op asks, and the shared map costs a process-wide lock and a hash: each thread
  // remembers its recent answers in a small direct-mapped table. Plans are never freed, so a
  // remembered pointer stays valid.
  struct Memo {
    const void* key = nullptr;
    const OpPlan* plan = nullptr;
  };
  constexpr size_t kSlots = 64;
  thread_local std::array<Memo, kSlots> memo;
  const void* key = &op.schema();
  // Schemas are heap objects: the low bits carry no information.
  Memo& slot = memo[(reinterpret_cast<uintptr_t>(key) >> 4) % kSlots];
  if (slot.key != key) slot = {key, &shared_plan_for(op, key)};
  return *slot.plan;
}

}  // namespace torchtpu::exec
