// Weight normalization (w = g * v / ||v||, the norm taken over every dim but `dim`) as the fused
// _weight_norm_interface that nn.utils.weight_norm reaches for dim 0 or the last dim, and its
// backward. Sums accumulate in f32 for half inputs, as CPU does.
#include <c10/util/Exception.h>

#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

// The dims of `v` that the norm runs over: all but `dim`.
std::vector<int64_t> reduced_dims(int64_t rank, int64_t dim) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) dims.push_back(d);
  }
  return dims;
}

// Sum over every dim but `dim`, broadcast back to `shape` (the kept dim stays in place).
Value sum_except(FunctionBuilder& b, Value x, int64_t dim) {
  Value zero = b.constant(0, TensorType(x.dtype(), {}));
  Value s = b.reduce_simple(x, zero, reduced_dims(x.rank(), dim), "stablehlo.add");
  return b.broadcast_in_dim(s, x.shape(), {dim});
}

// One entry per index of `dim` of a tensor that is constant along every other dim (what
// sum_except broadcast back), reshaped to `type` and converted.
Value along_dim(FunctionBuilder& b, Value x, int64_t dim, const TensorType& type) {
  std::vector<int64_t> limit(x.rank(), 1);
  limit[dim] = x.shape()[dim];
  Value row =
      b.slice(x, std::vector<int64_t>(x.rank(), 0), limit, std::vector<int64_t>(x.rank(), 1));
  return coerce(b, b.reshape(row, type.shape), type);
}

int64_t checked_dim(const LoweringContext& ctx, const Value& v, size_t index) {
  int64_t dim = wrap_dim(ctx.int_arg(index), v.rank());
  TORCH_CHECK(dim == 0 || dim == v.rank() - 1,
              "_weight_norm_interface: dim must be 0 or the last dim, got ", ctx.int_arg(index));
  return dim;
}

// _weight_norm_interface(v, g, dim) -> (w, norms)
std::vector<Value> lower_weight_norm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value v = ctx.tensor(0);
  Value g = ctx.tensor(1);
  TORCH_CHECK(v.rank() > 0, "_weight_norm_interface: v must have at least one dim");
  int64_t dim = checked_dim(ctx, v, 2);
  ElementType acc = opmath_type(v.dtype());
  Value vf = b.convert(v, acc);
  Value norms = b.unary("stablehlo.sqrt", sum_except(b, b.mul(vf, vf), dim));
  Value gf = b.broadcast_in_dim(b.reshape(b.convert(g, acc), {v.shape()[dim]}), v.shape(), {dim});
  Value w = b.mul(vf, b.div(gf, norms));
  return {coerce(b, w, ctx.out_type(0)), along_dim(b, norms, dim, ctx.out_type(1))};
}

// _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)
//   -> (grad_v, grad_g): with s = sum_except(grad_w * v),
//   grad_g = s / norm, grad_v = (g / norm) * grad_w - (g * s / norm^3) * v.
std::vector<Value> lower_weight_norm_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value v = ctx.tensor(1);
  int64_t dim = checked_dim(ctx, v, 4);
  ElementType acc = opmath_type(v.dtype());
  int64_t n = v.shape()[dim];
  auto spread = [&](Value x) {
    return b.broadcast_in_dim(b.reshape(b.convert(x, acc), {n}), v.shape(), {dim});
  };
  Value gw = b.convert(ctx.tensor(0), acc);
  Value vf = b.convert(v, acc);
  Value g = spread(ctx.tensor(2));
  Value norm = spread(ctx.tensor(3));
  Value s = sum_except(b, b.mul(gw, vf), dim);
  Value a = b.div(g, norm);
  Value coef = b.div(b.mul(a, s), b.mul(norm, norm));
  Value grad_v = b.sub(b.mul(a, gw), b.mul(coef, vf));
  Value grad_g = b.div(s, norm);
  return {coerce(b, grad_v, ctx.out_type(0)), along_dim(b, grad_g, dim, ctx.out_type(1))};
}

TORCHTPU_LOWERING("aten::_weight_norm_interface", lower_weight_norm);
TORCHTPU_LOWERING("aten::_weight_norm_interface_backward", lower_weight_norm_backward);

}  // namespace
}  // namespace torchtpu::lowering
