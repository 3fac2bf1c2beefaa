// Negative log likelihood (the tail of cross_entropy), forward and backward, for inputs of
// shape (N, C) or (C). Class selection is a one-hot compare against an iota, which keeps it a
// dense elementwise program instead of a gather.
#include <ATen/ExpandUtils.h>

#include <algorithm>

#include "lowering/lowering.h"
#include "lowering/strided.h"

namespace torchtpu::lowering {
namespace {

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

struct Picked {
  Value mask;     // (N, C) pred: class == target
  Value weights;  // (N,) per-sample weight, 0 where target == ignore_index
};

Picked pick(LoweringContext& ctx, Value input, Value target, size_t weight_arg,
            int64_t ignore_index) {
  auto& b = ctx.b;
  bool batched = input.rank() == 2;
  Value x = batched ? input : b.reshape(input, {1, input.shape()[0]});
  Value t = b.reshape(target, {x.shape()[0]});
  int64_t n = x.shape()[0], c = x.shape()[1];
  TensorType idx_type(t.dtype(), {n, c});
  Value classes = b.iota(idx_type, 1);
  Value mask = b.compare(classes, b.broadcast_in_dim(t, {n, c}, {0}), shlo::CompareDirection::kEQ);
  TensorType wt(input.dtype(), {n});
  Value w;
  if (ctx.is_none(weight_arg)) {
    w = b.constant(1.0, wt);
  } else {
    Value weight =
        b.broadcast_in_dim(b.convert(ctx.tensor(weight_arg), input.dtype()), {n, c}, {1});
    Value zero = b.constant(0.0, TensorType(input.dtype(), {n, c}));
    w = b.reduce_simple(b.select(mask, weight, zero),
                        b.constant(0.0, TensorType(input.dtype(), {})), {1}, "stablehlo.add");
  }
  Value valid = b.compare(t, b.constant_int(ignore_index, t.type), shlo::CompareDirection::kNE);
  w = b.select(valid, w, b.constant(0.0, wt));
  return {mask, w};
}

std::vector<Value> nll_forward(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value input = ctx.tensor(0);
  Value target = ctx.tensor(1);
  int64_t reduction = ctx.int_arg(3);
  int64_t ignore = ctx.int_arg(4);
  Picked p = pick(ctx, input, target, 2, ignore);
  Value x = input.rank() == 2 ? input : b.reshape(input, {1, input.shape()[0]});
  int64_t n = x.shape()[0], c = x.shape()[1];
  TensorType scalar(input.dtype(), {});
  Value zero_nc = b.constant(0.0, TensorType(input.dtype(), {n, c}));
  Value picked =
      b.reduce_simple(b.select(p.mask, x, zero_nc), b.constant(0.0, scalar), {1}, "stablehlo.add");
  Value losses = b.neg(b.mul(picked, p.weights));
  Value total_weight = b.reduce_simple(p.weights, b.constant(0.0, scalar), {0}, "stablehlo.add");
  Value out;
  if (reduction == kNone) {
    out = b.reshape(losses, ctx.out_type(0).shape);
  } else {
    out = b.reduce_simple(losses, b.constant(0.0, scalar), {0}, "stablehlo.add");
    if (reduction == kMean) out = b.div(out, total_weight);
  }
  return {out, b.convert(total_weight, ctx.out_type(1).dtype)};
}

std::vector<Value> nll_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value grad = ctx.tensor(0);
  Value input = ctx.tensor(1);
  Value target = ctx.tensor(2);
  int64_t reduction = ctx.int_arg(4);
  int64_t ignore = ctx.int_arg(5);
  Value total_weight = b.convert(ctx.tensor(6), input.dtype());
  Picked p = pick(ctx, input, target, 3, ignore);
  Value x = input.rank() == 2 ? input : b.reshape(input, {1, input.shape()[0]});
  int64_t n = x.shape()[0], c = x.shape()[1];
  Value g = b.convert(grad, input.dtype());
  if (reduction == kNone) {
    g = b.reshape(g, {n});
  } else {
    if (reduction == kMean) g = b.div(g, total_weight);
    g = b.broadcast_in_dim(g, {n}, {});
  }
  Value scale = b.neg(b.mul(g, p.weights));
  Value zero = b.constant(0.0, TensorType(input.dtype(), {n, c}));
  Value gi = b.select(p.mask, b.broadcast_in_dim(scale, {n, c}, {0}), zero);
  return {b.reshape(gi, input.shape())};
}

TORCHTPU_LOWERING("aten::nll_loss_forward", nll_forward);
TORCHTPU_LOWERING("aten::nll_loss_backward", nll_backward);

// Mean squared error. Half-precision inputs are computed and reduced in float32 (CPU accumulates
// its reductions in float32 too) and rounded once at the end.
ElementType mse_compute_type(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 ? ElementType::kF32 : t;
}

std::vector<Value> mse_forward(LoweringContext& ctx) {
  auto& b = ctx.b;
  int64_t reduction = ctx.int_arg(2);
  TensorType out = ctx.out_type();
  ElementType ct = mse_compute_type(out.dtype);
  // The elementwise shape is the broadcast of input and target (PyTorch warns, then broadcasts).
  std::vector<int64_t> shape = at::infer_size(ctx.tensor(0).shape(), ctx.tensor(1).shape());
  TensorType full(ct, shape);
  Value d = b.sub(coerce(b, ctx.tensor(0), full), coerce(b, ctx.tensor(1), full));
  Value sq = b.mul(d, d);
  if (reduction == kNone) return {coerce(b, sq, out)};
  std::vector<int64_t> dims(shape.size());
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
  Value total = b.reduce_simple(sq, b.constant(0.0, TensorType(ct, {})), dims, "stablehlo.add");
  if (reduction == kMean) {
    total = b.div(total, b.constant(static_cast<double>(numel_of(shape)), TensorType(ct, {})));
  }
  return {coerce(b, total, out)};
}

// grad_input = 2 * (input - target) * grad (/ numel for mean), in the input's shape.
std::vector<Value> mse_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  int64_t reduction = ctx.int_arg(3);
  TensorType out = ctx.out_type();
  TensorType full(mse_compute_type(out.dtype), out.shape);
  Value d = b.sub(coerce(b, ctx.tensor(1), full), coerce(b, ctx.tensor(2), full));
  double scale = 2.0;
  if (reduction == kMean) scale /= static_cast<double>(std::max<int64_t>(1, numel_of(out.shape)));
  Value g = b.mul(b.mul(d, b.constant(scale, full)), coerce(b, ctx.tensor(0), full));
  return {coerce(b, g, out)};
}

TORCHTPU_LOWERING("aten::mse_loss", mse_forward);
TORCHTPU_LOWERING("aten::mse_loss_backward", mse_backward);

}  // namespace
}  // namespace torchtpu::lowering
