// Losses with a dedicated aten op (and backward op). Negative log likelihood (the tail of
// cross_entropy) for inputs of shape (N, C), (C) and (N, C, H, W): class selection is a one-hot
// compare against an iota, which keeps it a dense elementwise program instead of a gather.
// The pointwise losses (mse, smooth_l1, huber, binary_cross_entropy) compute half precision in
// float32 and round once at the end.
#include <ATen/ExpandUtils.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "lowering/checks.h"
#include "lowering/common.h"
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

// `input` is (N, C) or (C); `target` holds one class per row.
std::vector<Value> nll_forward_core(LoweringContext& ctx, Value input, Value target) {
  auto& b = ctx.b;
  int64_t reduction = ctx.int_arg(3);
  int64_t ignore = ctx.int_arg(4);
  // A target outside the classes would select nothing and count as a zero loss.
  check_indices(ctx, target, 0, input.shape().back(), "Target {} is out of bounds.",
                /*index_error=*/true, ignore);
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

// Returns the (N, C) or (C) gradient; `grad` is (N) for reduction none, else 0-d.
Value nll_backward_core(LoweringContext& ctx, Value grad, Value input, Value target) {
  auto& b = ctx.b;
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
  return b.reshape(gi, input.shape());
}

std::vector<Value> nll_forward(LoweringContext& ctx) {
  return nll_forward_core(ctx, ctx.tensor(0), ctx.tensor(1));
}

std::vector<Value> nll_backward(LoweringContext& ctx) {
  return {nll_backward_core(ctx, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2))};
}

// nll_loss2d: input (N, C, H, W), target (N, H, W). Classes move last and the pixels become
// rows, which is the (N, C) case.
Value pixels_as_rows(FunctionBuilder& b, Value input) {
  const auto& s = input.shape();
  return b.reshape(b.transpose(input, {0, 2, 3, 1}), {s[0] * s[2] * s[3], s[1]});
}

std::vector<Value> nll2d_forward(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value input = ctx.tensor(0);
  Value target = ctx.tensor(1);
  std::vector<Value> r =
      nll_forward_core(ctx, pixels_as_rows(b, input), b.reshape(target, {target.type.numel()}));
  return {b.reshape(r[0], ctx.out_type(0).shape), r[1]};
}

std::vector<Value> nll2d_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value grad = ctx.tensor(0);
  Value input = ctx.tensor(1);
  Value target = ctx.tensor(2);
  if (grad.rank() > 0) grad = b.reshape(grad, {grad.type.numel()});
  Value gi = nll_backward_core(ctx, grad, pixels_as_rows(b, input),
                               b.reshape(target, {target.type.numel()}));
  const auto& s = input.shape();
  return {b.transpose(b.reshape(gi, {s[0], s[2], s[3], s[1]}), {0, 3, 1, 2})};
}

TORCHTPU_LOWERING("aten::nll_loss2d_forward", nll2d_forward);
TORCHTPU_LOWERING("aten::nll_loss2d_backward", nll2d_backward);
TORCHTPU_LOWERING("aten::nll_loss_forward", nll_forward);
TORCHTPU_LOWERING("aten::nll_loss_backward", nll_backward);

// ---- pointwise losses: l(x, t) elementwise in the broadcast shape, then reduced ----

using PointwiseFn = std::function<Value(FunctionBuilder&, Value x, Value t)>;

// `weight_arg`: an optional weight tensor multiplied into the elementwise loss (bce).
std::vector<Value> pointwise_forward(LoweringContext& ctx, int64_t reduction, const PointwiseFn& fn,
                                     std::optional<size_t> weight_arg = {}) {
  auto& b = ctx.b;
  TensorType out = ctx.out_type();
  ElementType ct = opmath_type(out.dtype);
  std::vector<int64_t> shape = at::infer_size(ctx.tensor(0).shape(), ctx.tensor(1).shape());
  TensorType full(ct, shape);
  Value l = fn(b, coerce(b, ctx.tensor(0), full), coerce(b, ctx.tensor(1), full));
  if (weight_arg && !ctx.is_none(*weight_arg)) {
    l = b.mul(l, coerce(b, ctx.tensor(*weight_arg), full));
  }
  if (reduction == kNone) return {coerce(b, l, out)};
  std::vector<int64_t> dims(shape.size());
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
  Value total = b.reduce_simple(l, b.constant(0.0, TensorType(ct, {})), dims, "stablehlo.add");
  if (reduction == kMean) {
    total = b.div(total, b.constant(static_cast<double>(numel_of(shape)), TensorType(ct, {})));
  }
  return {coerce(b, total, out)};
}

// Backward ops (grad_output, self, target, ...): grad_input = dl/dx(x, t) * grad (* weight)
// (/ numel for mean), in the shape the meta kernel gives.
std::vector<Value> pointwise_backward(LoweringContext& ctx, int64_t reduction,
                                      const PointwiseFn& dfn,
                                      std::optional<size_t> weight_arg = {}) {
  auto& b = ctx.b;
  TensorType out = ctx.out_type();
  TensorType full(opmath_type(out.dtype), out.shape);
  Value g = dfn(b, coerce(b, ctx.tensor(1), full), coerce(b, ctx.tensor(2), full));
  g = b.mul(g, coerce(b, ctx.tensor(0), full));
  if (weight_arg && !ctx.is_none(*weight_arg)) {
    g = b.mul(g, coerce(b, ctx.tensor(*weight_arg), full));
  }
  if (reduction == kMean) {
    g = b.div(g, b.constant(static_cast<double>(std::max<int64_t>(1, numel_of(out.shape))), full));
  }
  return {coerce(b, g, out)};
}

// Mean squared error. Half-precision inputs are computed and reduced in float32 (CPU accumulates
// its reductions in float32 too) and rounded once at the end.
std::vector<Value> mse_forward(LoweringContext& ctx) {
  return pointwise_forward(ctx, ctx.int_arg(2), [](FunctionBuilder& b, Value x, Value t) {
    Value d = b.sub(x, t);
    return b.mul(d, d);
  });
}

// grad_input = 2 * (input - target) * grad (/ numel for mean), in the input's shape. Not
// pointwise_backward: that rounds (2d * grad) / numel, this d * (2 / numel) * grad.
std::vector<Value> mse_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  int64_t reduction = ctx.int_arg(3);
  TensorType out = ctx.out_type();
  TensorType full(opmath_type(out.dtype), out.shape);
  Value d = b.sub(coerce(b, ctx.tensor(1), full), coerce(b, ctx.tensor(2), full));
  double scale = 2.0;
  if (reduction == kMean) scale /= static_cast<double>(std::max<int64_t>(1, numel_of(out.shape)));
  Value g = b.mul(b.mul(d, b.constant(scale, full)), coerce(b, ctx.tensor(0), full));
  return {coerce(b, g, out)};
}

TORCHTPU_LOWERING("aten::mse_loss", mse_forward);
TORCHTPU_LOWERING("aten::mse_loss_backward", mse_backward);

// smooth_l1: |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta (beta == 0 is l1).
std::vector<Value> smooth_l1_forward(LoweringContext& ctx) {
  double beta = ctx.double_arg(3);
  return pointwise_forward(ctx, ctx.int_arg(2), [beta](FunctionBuilder& b, Value x, Value t) {
    Value z = b.unary("stablehlo.abs", b.sub(x, t));
    if (beta == 0) return z;
    Value quad = b.div(b.mul(cst(b, 0.5, z), b.mul(z, z)), cst(b, beta, z));
    Value lin = b.sub(z, cst(b, 0.5 * beta, z));
    return b.select(b.compare(z, cst(b, beta, z), shlo::CompareDirection::kLT), quad, lin);
  });
}

// The CPU kernel's branch order: d <= -beta -> -1, d >= beta -> 1, else d / beta.
std::vector<Value> smooth_l1_backward(LoweringContext& ctx) {
  double beta = ctx.double_arg(4);
  return pointwise_backward(ctx, ctx.int_arg(3), [beta](FunctionBuilder& b, Value x, Value t) {
    Value d = b.sub(x, t);
    Value inner = beta == 0 ? cst(b, 0, d) : b.div(d, cst(b, beta, d));
    Value r =
        b.select(b.compare(d, cst(b, beta, d), shlo::CompareDirection::kGE), cst(b, 1, d), inner);
    return b.select(b.compare(d, cst(b, -beta, d), shlo::CompareDirection::kLE), cst(b, -1, d), r);
  });
}

// huber: |d| < delta ? 0.5 d^2 : delta (|d| - 0.5 delta).
std::vector<Value> huber_forward(LoweringContext& ctx) {
  double delta = ctx.double_arg(3);
  return pointwise_forward(ctx, ctx.int_arg(2), [delta](FunctionBuilder& b, Value x, Value t) {
    Value z = b.unary("stablehlo.abs", b.sub(x, t));
    Value quad = b.mul(cst(b, 0.5, z), b.mul(z, z));
    Value lin = b.mul(cst(b, delta, z), b.sub(z, cst(b, 0.5 * delta, z)));
    return b.select(b.compare(z, cst(b, delta, z), shlo::CompareDirection::kLT), quad, lin);
  });
}

std::vector<Value> huber_backward(LoweringContext& ctx) {
  double delta = ctx.double_arg(4);
  return pointwise_backward(ctx, ctx.int_arg(3), [delta](FunctionBuilder& b, Value x, Value t) {
    Value d = b.sub(x, t);
    Value r =
        b.select(b.compare(d, cst(b, delta, d), shlo::CompareDirection::kGE), cst(b, delta, d), d);
    return b.select(b.compare(d, cst(b, -delta, d), shlo::CompareDirection::kLE), cst(b, -delta, d),
                    r);
  });
}

// binary_cross_entropy(self, target, weight?, reduction): logs clamped at -100 like the CPU.
std::vector<Value> bce_forward(LoweringContext& ctx) {
  return pointwise_forward(
      ctx, ctx.int_arg(3),
      [](FunctionBuilder& b, Value x, Value t) {
        Value floor = cst(b, -100, x);
        Value log_x = b.max(b.unary("stablehlo.log", x), floor);
        Value log_1mx = b.max(b.unary("stablehlo.log_plus_one", b.neg(x)), floor);
        return b.sub(b.mul(b.sub(t, cst(b, 1, t)), log_1mx), b.mul(t, log_x));
      },
      2);
}

// grad * (x - t) / max((1 - x) x, 1e-12) (* weight).
std::vector<Value> bce_backward(LoweringContext& ctx) {
  return pointwise_backward(
      ctx, ctx.int_arg(4),
      [](FunctionBuilder& b, Value x, Value t) {
        Value denom = b.max(b.mul(b.sub(cst(b, 1, x), x), x), cst(b, 1e-12, x));
        return b.div(b.sub(x, t), denom);
      },
      3);
}

TORCHTPU_LOWERING("aten::smooth_l1_loss", smooth_l1_forward);
TORCHTPU_LOWERING("aten::smooth_l1_loss_backward", smooth_l1_backward);
TORCHTPU_LOWERING("aten::huber_loss", huber_forward);
TORCHTPU_LOWERING("aten::huber_loss_backward", huber_backward);
TORCHTPU_LOWERING("aten::binary_cross_entropy", bce_forward);
TORCHTPU_LOWERING("aten::binary_cross_entropy_backward", bce_backward);

}  // namespace
}  // namespace torchtpu::lowering
