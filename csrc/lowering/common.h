// What the op families share, defined once: the dtype policy (which types are "half", what an
// op computes and accumulates in) and small value/shape helpers. Lowerings include this instead
// of redefining them; scripts/check_lowering_helpers.py (part of the build) fails on a helper
// defined in two files.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lowering/lowering.h"
#include "stablehlo/builder.h"
#include "stablehlo/ops.h"
#include "stablehlo/types.h"

namespace torchtpu::lowering {

// ---- dtype policy ----

// bfloat16, float16 and the float8 types: the types PyTorch computes in float32
// (at::opmath_type) and rounds once.
inline bool is_half(shlo::ElementType t) {
  return t == shlo::ElementType::kBF16 || t == shlo::ElementType::kF16 || shlo::is_float8(t);
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

// Scatter (and reduce) bodies: the sum of the two block arguments, or the second (the update).
inline std::vector<Value> add_region(FunctionBuilder& b, const std::vector<Value>& a) {
  return {b.add(a[0], a[1])};
}
inline std::vector<Value> replace_region(FunctionBuilder&, const std::vector<Value>& a) {
  return {a[1]};
}

// Elementwise `while (any(active(state))) state = step(state, active)`: each step's result is
// kept only where the element is still active, so every element runs exactly its own scalar
// loop (series and continued fractions that converge at different counts).
using State = std::vector<Value>;
inline State elementwise_while(
    FunctionBuilder& b, const State& init,
    const std::function<Value(FunctionBuilder&, const State&)>& active,
    const std::function<State(FunctionBuilder&, const State&, Value)>& step) {
  auto cond = [&](FunctionBuilder& ib, const State& st) -> State {
    Value act = active(ib, st);
    std::vector<int64_t> dims(static_cast<size_t>(act.rank()));
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
    Value none = ib.constant(0, TensorType(ElementType::kPred, {}));
    return {ib.reduce_simple(act, none, dims, "stablehlo.or")};
  };
  auto body = [&](FunctionBuilder& ib, const State& st) -> State {
    Value act = active(ib, st);
    State next = step(ib, st, act);
    for (size_t k = 0; k < next.size(); ++k) next[k] = ib.select(act, next[k], st[k]);
    return next;
  };
  return b.while_loop(init, cond, body);
}

// The window of an inclusive scan along `dim` of a rank-`rank` value with `n` elements there:
// each output combines its element and the n - 1 before it (low padding n - 1 on `dim`).
inline shlo::Window scan_window(int64_t rank, int64_t dim, int64_t n) {
  shlo::Window w;
  w.dimensions.assign(static_cast<size_t>(rank), 1);
  w.dimensions[static_cast<size_t>(dim)] = n;
  w.strides.assign(static_cast<size_t>(rank), 1);
  w.padding.assign(static_cast<size_t>(rank), {0, 0});
  w.padding[static_cast<size_t>(dim)] = {n - 1, 0};
  return w;
}

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
