// What the op families share, defined once: the dtype policy (which types are "half", what an
// op computes and accumulates in) and small value/shape helpers. Lowerings include this instead
// of redefining them; scripts/check_lowering_helpers.py (part of the build) fails on a helper
// defined in two files.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lowering/lowering.h"
#include "stablehlo/builder.h"
#include "stablehlo/types.h"

namespace torchtpu::lowering {

// ---- dtype policy ----

// bfloat16 and float16: the types PyTorch computes in float32 (at::opmath_type) and rounds once.
inline bool is_half(shlo::ElementType t) {
  return t == shlo::ElementType::kBF16 || t == shlo::ElementType::kF16;
}

// PyTorch's opmath type: halves compute (and accumulate: sums, dot products, norms) in float32,
// every other type in itself.
inline shlo::ElementType opmath_type(shlo::ElementType t) {
  return is_half(t) ? shlo::ElementType::kF32 : t;
}

// float32 for every type but float64: the state math of the fused optimizers and the RNN cells,
// which PyTorch's kernels run in float unless the parameters are double.
inline shlo::ElementType f32_or_f64(shlo::ElementType t) {
  return t == shlo::ElementType::kF64 ? shlo::ElementType::kF64 : shlo::ElementType::kF32;
}

// The CPU kernels dispatch on a fixed dtype list; other dtypes are refused the same way
// ("<op>" not implemented for '<dtype>').
inline void require_dtype(const LoweringContext& ctx, const Value& x, bool ok) {
  std::string name = ctx.schema().name();
  TORCH_CHECK(ok, "\"", name.substr(name.find("::") + 2), "\" not implemented for '",
              c10::toString(to_scalar_type(x.dtype())), "'");
}

// ---- values ----

// A constant of `like`'s type (value splat), and a 0-d constant of dtype `t`.
inline Value cst(FunctionBuilder& b, double v, const Value& like) {
  return b.constant(v, like.type);
}
inline Value cst(FunctionBuilder& b, double v, ElementType t) {
  return b.constant(v, TensorType(t, {}));
}

// Logical operations on predicates (and bitwise ones on integers).
inline Value land(FunctionBuilder& b, Value p, Value q) { return b.binary("stablehlo.and", p, q); }
inline Value lor(FunctionBuilder& b, Value p, Value q) { return b.binary("stablehlo.or", p, q); }
inline Value lxor(FunctionBuilder& b, Value p, Value q) { return b.binary("stablehlo.xor", p, q); }
inline Value lnot(FunctionBuilder& b, Value p) { return b.unary("stablehlo.not", p); }

// `v` converted and broadcast to the op's (i-th) result type.
inline Value finish(LoweringContext& ctx, Value v) { return coerce(ctx.b, v, ctx.out_type()); }

// ---- shapes ----

// The product of `v` (the element count of a shape).
inline int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// How many elements of `x` a reduction over `dims` combines into one.
inline int64_t reduced_count(const Value& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.shape()[static_cast<size_t>(d)];
  return n;
}

}  // namespace torchtpu::lowering
