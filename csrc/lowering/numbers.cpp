#include "lowering/numbers.h"

#include <c10/util/Exception.h>

namespace torchtpu::lowering {

Value number(const LoweringContext& ctx, size_t i, ElementType dtype) {
  const LArg& a = ctx.arg(i);
  FunctionBuilder& b = ctx.b;
  if (a.kind == LArg::Kind::kScalar) return b.convert(a.value, dtype);
  if (a.kind == LArg::Kind::kTensor) {
    TORCH_CHECK(a.value.type.numel() == 1, "torchtpu: ", ctx.schema().name(), ": ",
                ctx.schema().arguments().at(i).name(), " must have one element");
    return b.reshape(b.convert(a.value, dtype), {});
  }
  TensorType t(dtype, {});
  const c10::IValue& v = a.ivalue;
  if (v.isInt()) return b.constant_int(v.toInt(), t);
  if (v.isBool()) return b.constant_int(v.toBool() ? 1 : 0, t);
  return b.constant(ctx.double_arg(i), t);
}

bool is_runtime_list(const LoweringContext& ctx, size_t i) {
  return ctx.arg(i).kind == LArg::Kind::kTensorList;
}

size_t list_size(const LoweringContext& ctx, size_t i) {
  return is_runtime_list(ctx, i) ? ctx.arg(i).values.size() : ctx.int_list(i).size();
}

Value list_element(const LoweringContext& ctx, size_t i, size_t k) {
  if (is_runtime_list(ctx, i)) {
    const auto& v = ctx.arg(i).values.at(k);
    TORCH_CHECK(v.has_value(), "torchtpu: ", ctx.schema().name(), ": missing list element");
    return ctx.b.convert(*v, ElementType::kS64);
  }
  return ctx.b.constant_int(ctx.int_list(i).at(k), TensorType(ElementType::kS64, {}));
}

}  // namespace torchtpu::lowering
