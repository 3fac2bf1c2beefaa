// Softmax and log-softmax along one dim, and the backward kernels autograd calls. Half inputs
// compute in f32 (CPU's vectorized kernels do the same) and round once.
#include <limits>

#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

// A 0-d tensor accepts dim 0/-1 but has no dim to reduce.
std::vector<int64_t> softmax_dims(const LoweringContext& ctx, size_t i, int64_t rank) {
  int64_t d = wrap_dim(ctx.int_arg(i), rank);
  return d < rank ? std::vector<int64_t>{d} : std::vector<int64_t>{};
}

// Reduces over `dims` and broadcasts back, i.e. a keepdim reduction ready for elementwise use.
Value reduce_keep(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims, double init,
                  const char* body) {
  Value r = b.reduce_simple(x, b.constant(init, TensorType(x.dtype(), {})), dims, body);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < x.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) kept.push_back(i);
  }
  return b.broadcast_in_dim(r, x.shape(), kept);
}

// Returns x - max(x) in f32-or-wider, shifted so exp never overflows.
Value shifted(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  FunctionBuilder& b = ctx.b;
  Value x = b.convert(ctx.tensor(0), opmath_type(ctx.out_type().dtype));
  Value m = reduce_keep(b, x, dims, -std::numeric_limits<double>::infinity(), "stablehlo.maximum");
  return b.sub(x, m);
}

std::vector<Value> lower_softmax(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  std::vector<int64_t> dims = softmax_dims(ctx, 1, ctx.tensor(0).rank());
  Value e = b.unary("stablehlo.exponential", shifted(ctx, dims));
  Value r = b.div(e, reduce_keep(b, e, dims, 0, "stablehlo.add"));
  return {b.convert(r, ctx.out_type().dtype)};
}

std::vector<Value> lower_log_softmax(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  std::vector<int64_t> dims = softmax_dims(ctx, 1, ctx.tensor(0).rank());
  Value s = shifted(ctx, dims);
  Value e = b.unary("stablehlo.exponential", s);
  Value r = b.sub(s, b.unary("stablehlo.log", reduce_keep(b, e, dims, 0, "stablehlo.add")));
  return {b.convert(r, ctx.out_type().dtype)};
}

// A softmax backward's operands (grad_output, output, dim, input_dtype): the gradient and the
// forward's output in the gradient's opmath dtype, and the reduced dims.
struct BackwardOperands {
  Value g, y;
  std::vector<int64_t> dims;
};

BackwardOperands backward_operands(LoweringContext& ctx) {
  ElementType acc = opmath_type(ctx.tensor(0).dtype());
  Value g = ctx.b.convert(ctx.tensor(0), acc);
  return {g, ctx.b.convert(ctx.tensor(1), acc), softmax_dims(ctx, 2, g.rank())};
}

// grad_input = y * (g - sum(g * y)) with y the forward output.
std::vector<Value> lower_softmax_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  auto [g, y, dims] = backward_operands(ctx);
  Value gy = b.mul(g, y);
  Value r = b.mul(y, b.sub(g, reduce_keep(b, gy, dims, 0, "stablehlo.add")));
  return {b.convert(r, ctx.out_type().dtype)};
}

// grad_input = g - exp(y) * sum(g) with y the forward (log-softmax) output.
std::vector<Value> lower_log_softmax_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  auto [g, y, dims] = backward_operands(ctx);
  Value sg = reduce_keep(b, g, dims, 0, "stablehlo.add");
  Value r = b.sub(g, b.mul(b.unary("stablehlo.exponential", y), sg));
  return {b.convert(r, ctx.out_type().dtype)};
}

TORCHTPU_LOWERING("aten::_softmax", lower_softmax);
TORCHTPU_LOWERING("aten::_log_softmax", lower_log_softmax);
TORCHTPU_LOWERING("aten::_softmax_backward_data", lower_softmax_backward);
TORCHTPU_LOWERING("aten::_log_softmax_backward_data", lower_log_softmax_backward);

}  // namespace
}  // namespace torchtpu::lowering
