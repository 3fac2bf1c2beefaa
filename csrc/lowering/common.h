// What the op families share, defined once: the dtype policy (which types are "half", what an
// op computes and accumulates in) and small value/shape helpers. Lowerings include this instead
// of redefining them; scripts/check_lowering_helpers.py (part of the build) fails on a helper
// defined in two files.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
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

// ---- statistics ----

// The mean of `x` over `dims` and x's deviations from it, accurate when the mean is large
// against the spread (the shifted-data algorithm): each group is summed as x - K, K its first
// element, so the sum holds deviations instead of n copies of the offset, whose float32
// rounding made batch norm's mean (and its output) up to 8x less accurate than the CPU's
// (issue 32: x = 1000 + randn). x - K is exact when x and K are within a factor of two, and the
// deviations are (x - K) - mean(x - K), never x minus a rounded mean. A non-finite K would make
// every deviation inf or NaN: such a group is not shifted, which keeps the plain two-pass
// results of inf and NaN inputs. Variances are sums of dev^2 (two-pass on the shifted data).
struct Centered {
  Value mean;  // reduced over dims
  Value dev;   // x - mean, at x's shape
};

inline Centered center(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims) {
  const std::vector<int64_t>& shape = x.shape();
  std::vector<int64_t> kept, kept_shape;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) continue;
    kept.push_back(i);
    kept_shape.push_back(shape[static_cast<size_t>(i)]);
  }
  auto back = [&](Value r) { return b.broadcast_in_dim(r, shape, kept); };
  const int64_t n = reduced_count(x, dims);
  Value shift = b.broadcast_to(b.constant(0, TensorType(x.dtype(), {})), kept_shape);
  if (n > 0) {
    std::vector<int64_t> limit = shape;
    for (int64_t d : dims) limit[static_cast<size_t>(d)] = 1;
    Value first = b.reshape(b.slice(x, std::vector<int64_t>(shape.size(), 0), limit,
                                    std::vector<int64_t>(shape.size(), 1)),
                            kept_shape);
    Value finite = shlo::is_complex(x.dtype()) ? land(b, shlo::is_finite(b, shlo::real(b, first)),
                                                      shlo::is_finite(b, shlo::imag(b, first)))
                                               : shlo::is_finite(b, first);
    shift = b.select(finite, first, shift);
  }
  Value d = b.sub(x, back(shift));
  Value sum = b.reduce_simple(d, b.constant(0, TensorType(x.dtype(), {})), dims, "stablehlo.add");
  Value m = b.div(sum, cst(b, static_cast<double>(n), sum));  // 0/0 = NaN for an empty group
  return {b.add(shift, m), b.sub(d, back(m))};
}

}  // namespace torchtpu::lowering
