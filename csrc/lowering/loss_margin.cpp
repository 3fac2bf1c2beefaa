// Margin losses with a dedicated aten op: multi_margin_loss (+ backward) and
// multilabel_margin_loss_forward (+ backward), following ATen's CPU kernels
// (LossMultiMargin.cpp, LossMultiLabelMargin.cpp). Class selection is a one-hot compare
// against an iota (dense (N, C) / (N, C, C) programs, no gathers). Half precision computes in
// float32 and rounds once.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <vector>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

// (N, C) view of a 0-d, (C) or (N, C) input.
std::pair<int64_t, int64_t> frame(const Value& x) {
  if (x.rank() == 0) return {1, 1};
  if (x.rank() == 1) return {1, x.shape()[0]};
  return {x.shape()[0], x.shape()[1]};
}

Value sum_dims(FunctionBuilder& b, Value v, const std::vector<int64_t>& dims) {
  return b.reduce_simple(v, b.constant(0.0, TensorType(v.dtype(), {})), dims, "stablehlo.add");
}

Value zeros(FunctionBuilder& b, const Value& like) { return b.constant(0.0, like.type); }

// The (N) per-sample losses as the reduction asks: as they are, their sum, or their mean.
Value reduce_per_sample(FunctionBuilder& b, Value per, int64_t reduction) {
  if (reduction == kNone) return per;
  Value out = sum_dims(b, per, {0});
  if (reduction == kMean) {
    out = b.div(out, b.constant(static_cast<double>(per.shape()[0]), out.type));
  }
  return out;
}

// ---- multi_margin_loss ----

struct MultiMargin {
  Value x;       // (N, C) compute dtype
  Value mask;    // (N, C) pred: class == target
  Value z;       // (N, C) margin - x[y] + x[d]
  Value active;  // (N, C) pred: z > 0 and d != y
  Value wy;      // (N, C) weight[y] (or 1)
  Value p_is_1;  // (N, C) pred
};

MultiMargin multi_margin_common(LoweringContext& ctx, size_t self_i, size_t target_i, size_t p_i,
                                size_t margin_i, size_t weight_i, ElementType ct) {
  auto& b = ctx.b;
  Value input = ctx.tensor(self_i);
  auto [n, c] = frame(input);
  std::vector<int64_t> nc = {n, c};
  Value x = b.reshape(b.convert(input, ct), nc);
  Value t = ctx.tensor(target_i);
  t = b.reshape(t, {n});
  Value mask = b.compare(b.iota(TensorType(t.dtype(), nc), 1), b.broadcast_in_dim(t, nc, {0}),
                         CompareDirection::kEQ);
  Value xy = sum_dims(b, b.select(mask, x, zeros(b, x)), {1});
  Value margin = b.broadcast_to(ctx.operand(margin_i, ct), nc);
  Value z = b.add(b.sub(margin, b.broadcast_in_dim(xy, nc, {0})), x);
  Value active = b.binary("stablehlo.and", cmp(b, z, zeros(b, z), CompareDirection::kGT),
                          b.unary("stablehlo.not", mask));
  Value wy = b.constant(1.0, x.type);
  if (!ctx.is_none(weight_i)) {
    Value w = b.broadcast_in_dim(b.convert(ctx.tensor(weight_i), ct), nc, {1});
    wy = b.broadcast_in_dim(sum_dims(b, b.select(mask, w, zeros(b, w)), {1}), nc, {0});
  }
  Value p = b.broadcast_to(ctx.operand(p_i, ct), nc);
  Value p_is_1 = cmp(b, p, b.constant(1.0, x.type), CompareDirection::kEQ);
  return {x, mask, z, active, wy, p_is_1};
}

std::vector<Value> lower_multi_margin_loss(LoweringContext& ctx) {
  auto& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  TORCH_CHECK(is_fp(ct), "torchtpu lowering: multi_margin_loss needs a floating point input");
  int64_t reduction = ctx.int_arg(ctx.index_of("reduction"));
  MultiMargin m = multi_margin_common(ctx, 0, 1, 2, 3, 4, ct);
  auto [n, c] = frame(ctx.tensor(0));
  Value h = b.select(m.p_is_1, m.z, b.mul(m.z, m.z));
  h = b.mul(h, m.wy);
  h = b.select(m.active, h, zeros(b, h));
  Value per = b.div(sum_dims(b, h, {1}), b.constant(static_cast<double>(c), TensorType(ct, {n})));
  Value out = reduce_per_sample(b, per, reduction);
  return {coerce(b, b.reshape(out, ctx.out_type().shape), ctx.out_type())};
}

// Scales a per-element gradient by grad_output: per row for reduction none with a
// dimensioned grad_output, else by the scalar.
Value scale_by_grad(FunctionBuilder& b, Value grad_in, Value go, int64_t reduction, int64_t n,
                    int64_t c, ElementType ct) {
  go = b.convert(go, ct);
  std::vector<int64_t> nc = {n, c};
  if (reduction == kNone && go.rank() > 0) {
    return b.mul(grad_in, b.broadcast_in_dim(b.reshape(go, {n}), nc, {0}));
  }
  return b.mul(grad_in, b.broadcast_to(b.reshape(go, {}), nc));
}

std::vector<Value> lower_multi_margin_loss_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  int64_t reduction = ctx.int_arg(ctx.index_of("reduction"));
  MultiMargin m = multi_margin_common(ctx, 1, 2, 3, 4, 5, ct);
  auto [n, c] = frame(ctx.tensor(1));
  double g = reduction == kMean ? 1.0 / static_cast<double>(n * c) : 1.0 / static_cast<double>(c);
  Value gv = b.constant(g, m.x.type);
  Value h = b.select(m.p_is_1, gv, b.mul(b.mul(b.constant(2.0, m.x.type), gv), m.z));
  h = b.mul(h, m.wy);
  h = b.select(m.active, h, zeros(b, h));
  Value neg_total = b.neg(sum_dims(b, h, {1}));
  Value grad = b.select(m.mask, b.broadcast_in_dim(neg_total, {n, c}, {0}), h);
  grad = scale_by_grad(b, grad, ctx.tensor(0), reduction, n, c, ct);
  return {coerce(b, b.reshape(grad, ctx.out_type().shape), ctx.out_type())};
}

// ---- multilabel_margin_loss ----

struct MultiLabel {
  Value x;          // (N, C)
  Value eq3;        // (N, J, K) pred: target[i, j] == k
  Value valid;      // (N, J) pred: j before the first -1
  Value is_target;  // (N, K) pred
  Value z;          // (N, J, K) 1 - x[y_j] + x[k]
  Value active;     // (N, J, K) pred: valid j, k not a target, z > 0
};

MultiLabel multilabel_common(LoweringContext& ctx, Value input, Value target, ElementType ct,
                             std::optional<Value> is_target_in) {
  auto& b = ctx.b;
  auto [n, c] = frame(input);
  std::vector<int64_t> nc = {n, c}, ncc = {n, c, c};
  Value x = b.reshape(b.convert(input, ct), nc);
  Value t = b.reshape(target, nc);
  TensorType it(t.dtype(), nc);
  Value pos = b.iota(it, 1);
  Value is_neg = b.compare(t, b.constant_int(-1, it), CompareDirection::kEQ);
  Value first_neg =
      b.reduce_simple(b.select(is_neg, pos, b.constant_int(c, it)),
                      b.constant_int(c, TensorType(t.dtype(), {})), {1}, "stablehlo.minimum");
  Value valid = b.compare(pos, b.broadcast_in_dim(first_neg, nc, {0}), CompareDirection::kLT);
  Value eq3 = b.compare(b.broadcast_in_dim(t, ncc, {0, 1}), b.iota(TensorType(t.dtype(), ncc), 2),
                        CompareDirection::kEQ);
  Value valid3 = b.broadcast_in_dim(valid, ncc, {0, 1});
  Value is_target;
  if (is_target_in) {
    Value itv = b.reshape(b.convert(*is_target_in, ct), nc);
    is_target = cmp(b, itv, zeros(b, itv), CompareDirection::kNE);
  } else {
    Value hit = b.binary("stablehlo.and", eq3, valid3);
    is_target = b.reduce_simple(hit, b.constant(0, TensorType(ElementType::kPred, {})), {1},
                                "stablehlo.or");
  }
  Value x3 = b.broadcast_in_dim(x, ncc, {0, 2});
  Value xy = sum_dims(b, b.select(eq3, x3, zeros(b, x3)), {2});  // (N, J)
  Value z = b.add(b.sub(b.constant(1.0, x3.type), b.broadcast_in_dim(xy, ncc, {0, 1})), x3);
  Value active = b.binary("stablehlo.and", valid3,
                          b.unary("stablehlo.not", b.broadcast_in_dim(is_target, ncc, {0, 2})));
  active = b.binary("stablehlo.and", active, cmp(b, z, zeros(b, z), CompareDirection::kGT));
  return {x, eq3, valid, is_target, z, active};
}

std::vector<Value> lower_multilabel_margin_loss_forward(LoweringContext& ctx) {
  auto& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type(0).dtype);
  TORCH_CHECK(is_fp(ct), "torchtpu lowering: multilabel_margin_loss needs a floating point input");
  int64_t reduction = ctx.int_arg(2);
  Value input = ctx.tensor(0);
  auto [n, c] = frame(input);
  MultiLabel m = multilabel_common(ctx, input, ctx.tensor(1), ct, std::nullopt);
  Value terms = b.select(m.active, m.z, zeros(b, m.z));
  Value per =
      b.div(sum_dims(b, terms, {1, 2}), b.constant(static_cast<double>(c), TensorType(ct, {n})));
  Value out = reduce_per_sample(b, per, reduction);
  Value is_t = b.convert(m.is_target, ctx.out_type(1).dtype);
  return {coerce(b, b.reshape(out, ctx.out_type(0).shape), ctx.out_type(0)),
          b.reshape(is_t, ctx.out_type(1).shape)};
}

std::vector<Value> lower_multilabel_margin_loss_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  ElementType ct = opmath_type(ctx.out_type().dtype);
  int64_t reduction = ctx.int_arg(3);
  Value input = ctx.tensor(1);
  auto [n, c] = frame(input);
  MultiLabel m = multilabel_common(ctx, input, ctx.tensor(2), ct, ctx.tensor(4));
  double g = reduction == kMean ? 1.0 / static_cast<double>(n * c) : 1.0 / static_cast<double>(c);
  std::vector<int64_t> nc = {n, c}, ncc = {n, c, c};
  Value one3 = b.constant(1.0, TensorType(ct, ncc));
  Value act = b.select(m.active, one3, zeros(b, one3));
  Value plus = sum_dims(b, act, {1});                                     // (N, K)
  Value cnt_j = sum_dims(b, act, {2});                                    // (N, J)
  Value cnt3 = b.broadcast_in_dim(cnt_j, ncc, {0, 1});                    // over (N, J, C)
  Value minus = sum_dims(b, b.select(m.eq3, cnt3, zeros(b, cnt3)), {1});  // (N, C)
  Value grad = b.mul(b.sub(plus, minus), b.constant(g, TensorType(ct, nc)));
  grad = scale_by_grad(b, grad, ctx.tensor(0), reduction, n, c, ct);
  return {coerce(b, b.reshape(grad, ctx.out_type().shape), ctx.out_type())};
}

}  // namespace

TORCHTPU_LOWERING("aten::multi_margin_loss", lower_multi_margin_loss);
TORCHTPU_LOWERING("aten::multi_margin_loss_backward", lower_multi_margin_loss_backward);
TORCHTPU_LOWERING("aten::multilabel_margin_loss_forward", lower_multilabel_margin_loss_forward);
TORCHTPU_LOWERING("aten::multilabel_margin_loss_backward", lower_multilabel_margin_loss_backward);

}  // namespace torchtpu::lowering
