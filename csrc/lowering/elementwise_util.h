// Small helpers the elementwise op families share.
#pragma once

#include "lowering/lowering.h"

namespace torchtpu::lowering::ew {

using shlo::CompareDirection;

inline bool is_half(ElementType t) { return t == ElementType::kF16 || t == ElementType::kBF16; }
inline bool is_fp(ElementType t) { return shlo::is_float(t); }
inline Value cst(FunctionBuilder& b, double v, const Value& like) {
  return b.constant(v, like.type);
}
inline Value cmp(FunctionBuilder& b, Value x, Value y, CompareDirection d) {
  return b.compare(x, y, d);
}
inline Value lt0(FunctionBuilder& b, Value x) {
  return cmp(b, x, cst(b, 0, x), CompareDirection::kLT);
}
inline Value is_nan(FunctionBuilder& b, Value x) { return cmp(b, x, x, CompareDirection::kNE); }
inline Value lor(FunctionBuilder& b, Value p, Value q) { return b.binary("stablehlo.or", p, q); }

// XLA's maximum/minimum return the non-NaN operand on CPU; PyTorch propagates NaN.
inline Value max_nan(FunctionBuilder& b, Value x, Value y) {
  Value r = b.max(x, y);
  if (!is_fp(x.dtype())) return r;
  r = b.select(is_nan(b, x), x, r);
  return b.select(is_nan(b, y), y, r);
}

inline Value min_nan(FunctionBuilder& b, Value x, Value y) {
  Value r = b.min(x, y);
  if (!is_fp(x.dtype())) return r;
  r = b.select(is_nan(b, x), x, r);
  return b.select(is_nan(b, y), y, r);
}

// Argument i broadcast to the result shape, in dtype `dt`.
inline Value operand(LoweringContext& ctx, size_t i, ElementType dt) {
  return coerce(ctx.b, ctx.tensor(i), ctx.out_type().with_dtype(dt));
}

}  // namespace torchtpu::lowering::ew
