// Fractional max pooling (fractional_max_pool{2,3}d and their backward), as ATen's CPU kernels
// (FractionalMaxPool2d.cpp / FractionalMaxPool3d.cpp):
// - per plane, window starts come from generate_intervals in the sample's dtype:
//   alpha = (in - pool) / (out - 1), start[i] = int((i + u) * alpha) - int(u * alpha), and the
//   last start is in - pool; random_samples[n, c] holds u for (W, H) in 2d and (T, H, W) in 3d;
// - each output is the max of its pool-size window with its flat index in the plane: a NaN
//   always replaces the running max (the last NaN wins), otherwise the first maximum is kept.
// The backward scatter-adds grad_output at the recorded indices.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <limits>
#include <string>

#include "lowering/lowering.h"
#include "lowering/pooling.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// (P, out) i64 window starts for one dim from u (P) in the sample dtype `st`.
Value intervals(FunctionBuilder& b, Value u, int64_t in, int64_t out, int64_t pool,
                ElementType st) {
  int64_t p = u.shape()[0];
  TensorType it(ElementType::kS64, {p, out});
  if (out <= 1) return b.constant_int(in - pool, it);
  TensorType ft(st, {p, out});
  double alpha =
      st == ElementType::kF64
          ? static_cast<double>(in - pool) / static_cast<double>(out - 1)
          : static_cast<double>(static_cast<float>(in - pool) / static_cast<float>(out - 1));
  Value a = b.constant(alpha, ft);
  Value ub = b.broadcast_in_dim(u, {p, out}, {0});
  Value i = b.convert(b.iota(it, 1), st);
  Value first = b.convert(b.mul(b.add(i, ub), a), ElementType::kS32);
  Value second = b.convert(b.mul(ub, a), ElementType::kS32);
  Value seq = b.convert(b.sub(first, second), ElementType::kS64);
  Value last = b.compare(b.iota(it, 1), b.constant_int(out - 1, it), CompareDirection::kEQ);
  return b.select(last, b.constant_int(in - pool, it), seq);
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples)
LoweringFn fractional_max_pool(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    Value x = ctx.tensor(0);
    std::vector<int64_t> kernel = ctx.int_list(1), osize = ctx.int_list(2);
    Value samples = ctx.tensor(3);
    const TensorType& out = ctx.out_type(0);
    const TensorType& idx_t = ctx.out_type(1);
    TORCH_CHECK(shlo::is_float(x.dtype()), "fractional_max_pool", nd,
                "d: torchtpu supports floating inputs only");
    if (out.numel() == 0 || x.type.numel() == 0) return {zeros(b, out), zeros(b, idx_t)};
    size_t lead = static_cast<size_t>(x.rank()) - nd;
    std::vector<int64_t> in(x.shape().begin() + static_cast<int64_t>(lead), x.shape().end());
    int64_t planes = 1, plane_size = 1, o_all = 1, k_all = 1;
    for (size_t i = 0; i < lead; ++i) planes *= x.shape()[i];
    for (size_t i = 0; i < nd; ++i) {
      plane_size *= in[i];
      o_all *= osize[i];
      k_all *= kernel[i];
    }
    ElementType st = samples.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
    Value s = b.convert(b.reshape(samples, {planes, static_cast<int64_t>(nd)}), st);
    // Flat index of every (plane, out..., k...) element.
    std::vector<int64_t> shape = {planes};
    for (size_t i = 0; i < nd; ++i) shape.push_back(osize[i]);
    for (size_t i = 0; i < nd; ++i) shape.push_back(kernel[i]);
    TensorType it(ElementType::kS64, shape);
    Value flat = b.constant_int(0, it);
    int64_t stride = 1;
    for (size_t d = nd; d-- > 0;) {
      // 2d samples are (W, H); 3d samples are (T, H, W).
      size_t col = nd == 2 ? 1 - d : d;
      Value u = b.reshape(b.slice(s, {0, static_cast<int64_t>(col)},
                                  {planes, static_cast<int64_t>(col) + 1}, {1, 1}),
                          {planes});
      Value seq = intervals(b, u, in[d], osize[d], kernel[d], st);
      Value start = b.broadcast_in_dim(seq, shape, {0, static_cast<int64_t>(1 + d)});
      Value pos = b.add(start, b.iota(it, static_cast<int64_t>(1 + nd + d)));
      flat = b.add(flat, b.mul(pos, b.constant_int(stride, it)));
      stride *= in[d];
    }
    Value flat3 = b.reshape(flat, {planes, o_all, k_all, 1});
    Value plane = b.iota(TensorType(ElementType::kS64, {planes, o_all, k_all, 1}), 0);
    Value coords = b.concatenate({plane, flat3}, 3);
    Value xs = b.reshape(x, {planes, plane_size});
    Value vals = b.gather(xs, coords, {{}, {0, 1}, {0, 1}, 3}, {1, 1},
                          TensorType(x.dtype(), {planes, o_all, k_all}));
    Value idx = b.reshape(flat, {planes, o_all, k_all});
    Value k = b.iota(TensorType(ElementType::kS64, {planes, o_all, k_all}), 2);
    TensorType vs(x.dtype(), {}), is(ElementType::kS64, {});
    // Reduce (value, index, window position): the later NaN wins; else the larger value, ties
    // to the earlier position.
    std::vector<Value> r = b.reduce(
        {vals, idx, k},
        {b.constant(-std::numeric_limits<double>::infinity(), vs),
         b.constant_int(std::numeric_limits<int64_t>::max(), is),
         b.constant_int(std::numeric_limits<int64_t>::max(), is)},
        {2}, [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
          Value av = a[0], ai = a[1], ak = a[2], bv = a[3], bi = a[4], bk = a[5];
          Value a_nan = rb.compare(av, av, CompareDirection::kNE);
          Value b_nan = rb.compare(bv, bv, CompareDirection::kNE);
          Value later = rb.compare(ak, bk, CompareDirection::kGT);
          Value earlier = rb.compare(ak, bk, CompareDirection::kLT);
          Value greater = rb.compare(av, bv, CompareDirection::kGT);
          Value eq = rb.compare(av, bv, CompareDirection::kEQ);
          Value plain = rb.binary("stablehlo.or", greater, rb.binary("stablehlo.and", eq, earlier));
          Value both_nan = rb.binary("stablehlo.and", a_nan, b_nan);
          Value pick_a =
              rb.select(both_nan, later, rb.select(a_nan, a_nan, rb.select(b_nan, b_nan, plain)));
          // a NaN / b not: pick a; b NaN / a not: pick b (pick_a = false).
          pick_a = rb.select(rb.binary("stablehlo.and", b_nan, rb.unary("stablehlo.not", a_nan)),
                             rb.compare(ak, ak, CompareDirection::kNE), pick_a);
          return {rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi), rb.select(pick_a, ak, bk)};
        });
    return {coerce(b, b.reshape(r[0], out.shape), out),
            coerce(b, b.reshape(r[1], idx_t.shape), idx_t)};
  };
}

// fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size, output_size, indices):
// grad_input[plane, indices[plane, j]] += grad_output[plane, j].
LoweringFn fractional_max_pool_backward(size_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    Value grad = ctx.tensor(0);
    Value x = ctx.tensor(1);
    Value indices = ctx.tensor(4);
    const TensorType& out = ctx.out_type();
    size_t lead = static_cast<size_t>(x.rank()) - nd;
    return {scatter_planes(b, grad, indices, out, lead)};
  };
}

TORCHTPU_LOWERING("aten::fractional_max_pool2d", fractional_max_pool(2));
TORCHTPU_LOWERING("aten::fractional_max_pool3d", fractional_max_pool(3));
TORCHTPU_LOWERING("aten::fractional_max_pool2d_backward", fractional_max_pool_backward(2));
TORCHTPU_LOWERING("aten::fractional_max_pool3d_backward", fractional_max_pool_backward(3));

}  // namespace
}  // namespace torchtpu::lowering
