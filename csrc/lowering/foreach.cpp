// The _foreach_* ops optimizers use, lowered as their per-tensor op applied to each list
// element inside ONE program: a whole optimizer step over all parameters is one launch.
#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <set>
#include <unordered_map>

#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

std::string name_of(const c10::OperatorName& n) {
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

std::string elem_type(const c10::TypePtr& t) {
  std::string s = t->str();
  if (s == "Tensor[]") return "Tensor";
  if (s == "Scalar[]") return "Scalar";
  return s;
}

struct ElemPlan {
  c10::OperatorHandle op;
  const LoweringFn* lowering;
  std::vector<int> source;  // element arg j <- foreach arg source[j], or -1: its default
};

std::optional<ElemPlan> find_elem_plan(const c10::FunctionSchema& schema) {
  std::string base = schema.name();  // aten::_foreach_add
  const std::string prefix = "aten::_foreach_";
  if (base.rfind(prefix, 0) != 0) return std::nullopt;
  std::string elem = "aten::" + base.substr(prefix.size());
  if (elem == "aten::norm") elem = "aten::linalg_vector_norm";
  const auto& fargs = schema.arguments();
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name != elem) continue;
    const LoweringFn* fn = find_lowering(name_of(name));
    if (!fn) continue;
    auto handle = c10::Dispatcher::singleton().findOp(name);
    const auto& eargs = handle->schema().arguments();
    if (handle->schema().returns().size() != 1) continue;
    std::vector<int> source;
    bool ok = true;
    size_t used = 0;
    for (size_t j = 0; j < eargs.size() && ok; ++j) {
      // Match by position for the leading arguments, by name for the rest.
      int src = -1;
      if (used < fargs.size() && elem_type(fargs[used].type()) == eargs[j].type()->str()) {
        src = static_cast<int>(used++);
      } else {
        for (size_t k = 0; k < fargs.size(); ++k) {
          if (fargs[k].name() == eargs[j].name()) src = static_cast<int>(k);
        }
        if (src < 0 && eargs[j].name() == "dim" && eargs[j].default_value()) src = -1;
        if (src < 0 && !eargs[j].default_value()) ok = false;
        if (src >= 0) used = std::max(used, static_cast<size_t>(src) + 1);
      }
      source.push_back(src);
    }
    if (ok && used == fargs.size()) return ElemPlan{*handle, fn, source};
  }
  return std::nullopt;
}

// The element op's arguments for list position i. `lists` (batched form): the value that stands
// for every tensor list argument, by argument position, instead of its i-th element.
std::vector<LArg> element_args(const ElemPlan& plan, LoweringContext& ctx, size_t i,
                               ElementType scalar_dtype, const std::vector<Value>* lists) {
  const auto& eargs = plan.op.schema().arguments();
  std::vector<LArg> largs;
  for (size_t j = 0; j < eargs.size(); ++j) {
    LArg a;
    int src = plan.source[j];
    c10::IValue v = src < 0 ? eargs[j].default_value().value_or(c10::IValue()) : c10::IValue();
    if (src >= 0) {
      const LArg& f = ctx.arg(static_cast<size_t>(src));
      if (f.kind == LArg::Kind::kTensorList) {
        a.kind = LArg::Kind::kTensor;
        a.value = lists ? lists->at(static_cast<size_t>(src)) : *f.values.at(i);
        largs.push_back(a);
        continue;
      }
      if (f.kind == LArg::Kind::kConst && f.ivalue.isList()) {
        v = f.ivalue.toListRef().at(i);
      } else {
        largs.push_back(f);
        continue;
      }
    }
    if (v.isScalar() && eargs[j].type()->kind() == c10::TypeKind::NumberType) {
      c10::Scalar s = v.toScalar();
      TensorType t(s.isBoolean()         ? ElementType::kPred
                   : s.isIntegral(false) ? ElementType::kS64
                                         : scalar_dtype,
                   {});
      a.kind = LArg::Kind::kScalar;
      a.value =
          s.isFloatingPoint() ? ctx.b.constant(s.toDouble(), t) : ctx.b.constant_int(s.toLong(), t);
      a.ivalue = v;
    } else {
      a.kind = v.isNone() ? LArg::Kind::kNone : LArg::Kind::kConst;
      a.ivalue = v;
    }
    largs.push_back(a);
  }
  return largs;
}

ElementType scalar_dtype_for(const TensorType& out) {
  return out.dtype == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
}

// Lists of 0-d tensors (an optimizer's per-parameter step counters and the bias corrections made
// from them) as ONE element op over a vector of all of them: XLA then runs a few kernels where it
// ran one per parameter and op (tiny Llama's AdamW step: 87 scalar kernels). Only when every
// tensor argument is such a list of one dtype and nothing differs per element but the tensors,
// so the element op sees the same operand kinds and dtypes, only with a leading dimension.
std::optional<std::vector<Value>> batched_scalars(const ElemPlan& plan, LoweringContext& ctx) {
  // Element ops that act on each element alone: a reduction (_foreach_norm, _foreach_max) would
  // reduce across the list's elements.
  static const std::set<std::string> elementwise = {
      "aten::abs",       "aten::add",       "aten::addcdiv", "aten::addcmul", "aten::ceil",
      "aten::clamp_max", "aten::clamp_min", "aten::copy",    "aten::cos",     "aten::div",
      "aten::exp",       "aten::expm1",     "aten::floor",   "aten::frac",    "aten::lerp",
      "aten::log",       "aten::log10",     "aten::log1p",   "aten::log2",    "aten::maximum",
      "aten::minimum",   "aten::mul",       "aten::neg",     "aten::pow",     "aten::reciprocal",
      "aten::round",     "aten::rsqrt",     "aten::sigmoid", "aten::sign",    "aten::sin",
      "aten::sqrt",      "aten::sub",       "aten::tan",     "aten::tanh",    "aten::trunc",
      "aten::zero"};
  if (!elementwise.count(plan.op.schema().name())) return std::nullopt;
  size_t n = ctx.out_types().size();
  if (n < 2) return std::nullopt;
  for (const TensorType& t : ctx.out_types()) {
    if (t.rank() != 0 || t.dtype != ctx.out_type(0).dtype) return std::nullopt;
  }
  std::vector<Value> lists(ctx.num_args());
  for (size_t k = 0; k < ctx.num_args(); ++k) {
    const LArg& f = ctx.arg(k);
    if (f.kind == LArg::Kind::kTensor) return std::nullopt;
    if (f.kind == LArg::Kind::kConst && f.ivalue.isList()) return std::nullopt;
    if (f.kind != LArg::Kind::kTensorList) continue;
    if (f.values.size() != n) return std::nullopt;
    std::vector<Value> parts;
    for (const auto& v : f.values) {
      if (!v || v->rank() != 0 || v->dtype() != f.values[0]->dtype()) return std::nullopt;
      parts.push_back(ctx.b.reshape(*v, {1}));
    }
    lists[k] = ctx.b.concatenate(parts, 0);
  }
  auto n64 = static_cast<int64_t>(n);
  TensorType vec(ctx.out_type(0).dtype, {n64});
  LoweringContext sub(ctx.b, plan.op.schema(),
                      element_args(plan, ctx, 0, scalar_dtype_for(vec), &lists), {vec},
                      ctx.platform());
  Value all = (*plan.lowering)(sub).at(0);
  if (all.type != vec) return std::nullopt;  // unused then; XLA drops it
  std::vector<Value> out;
  for (int64_t i = 0; i < n64; ++i) {
    out.push_back(ctx.b.reshape(ctx.b.slice(all, {i}, {i + 1}, {1}), {}));
  }
  return out;
}

LoweringFn make_foreach(ElemPlan plan) {
  return [plan](LoweringContext& ctx) -> std::vector<Value> {
    if (auto batched = batched_scalars(plan, ctx)) return *batched;
    size_t n = ctx.out_types().size();
    std::vector<Value> out;
    for (size_t i = 0; i < n; ++i) {
      LoweringContext sub(ctx.b, plan.op.schema(),
                          element_args(plan, ctx, i, scalar_dtype_for(ctx.out_type(i)), nullptr),
                          {ctx.out_type(i)}, ctx.platform());
      out.push_back((*plan.lowering)(sub).at(0));
    }
    return out;
  };
}

}  // namespace

const LoweringFn* foreach_lowering(const c10::OperatorHandle& op) {
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  std::string name = name_of(op.schema().operator_name());
  if (const LoweringFn* fn = find_lowering(name)) return fn;
  auto plan = find_elem_plan(op.schema());
  if (!plan) return nullptr;
  register_lowering(name, make_foreach(*plan), kGraphOnly);
  return find_lowering(name);
}

}  // namespace torchtpu::lowering
