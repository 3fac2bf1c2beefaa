// Batch, layer and group normalization, forward and backward. Statistics are two-pass on
// shifted data (common.h's center: the mean of x - K, K one element of each group, then the mean
// of squared deviations), in f32 for half-precision inputs like the CPU kernels' opmath, so
// they keep their accuracy when a channel's mean is large against its spread; results are
// converted to the dtypes PyTorch's meta kernels give.
//
// Backward formulas (xhat = (x - mean) * rstd, g = grad_out * weight, means over the
// normalized elements of each group):
//   grad_input  = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   grad_weight = sum(grad_out * xhat), grad_bias = sum(grad_out)  over everything else.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>

#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

Value sum(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims) {
  return b.reduce_simple(x, b.constant(0, TensorType(x.dtype(), {})), dims, "stablehlo.add");
}

// Broadcasts a value reduced over `dims` back to `shape`.
Value back(FunctionBuilder& b, Value reduced, const std::vector<int64_t>& shape,
           const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) kept.push_back(i);
  }
  return b.broadcast_in_dim(reduced, shape, kept);
}

struct Stats {
  Value mean, var;  // reduced over dims (biased variance)
  Value dev;        // x - mean at x's shape (common.h's center: accurate at large means)
};

Stats moments(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims) {
  double n = static_cast<double>(reduced_count(x, dims));
  Centered c = center(b, x, dims);
  Value var = sum(b, b.mul(c.dev, c.dev), dims);
  var = b.div(var, cst(b, n, var));
  return {c.mean, var, c.dev};
}

Value rsqrt_eps(FunctionBuilder& b, Value var, double eps) {
  return b.unary("stablehlo.rsqrt", b.add(var, cst(b, eps, var)));
}

// Optional per-channel tensor (weight, bias, running stats) broadcast along `dim` of `shape`.
std::optional<Value> channel(LoweringContext& ctx, size_t i, ElementType t,
                             const std::vector<int64_t>& shape, int64_t dim) {
  if (ctx.is_none(i)) return std::nullopt;
  return ctx.b.broadcast_in_dim(ctx.b.convert(ctx.tensor(i), t), shape, {dim});
}

std::vector<int64_t> batch_norm_dims(const Value& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.rank(); ++d) dims.push_back(d);
  return dims;
}

// ---- batch norm ----

struct BatchNormArgs {
  size_t weight, bias, running_mean, running_var;
  bool training;
  double momentum, eps;
};

// out, save_mean, save_invstd and, when `update`, the new running mean and variance.
// `stats_out`: the index of the running-mean output among the op's outputs.
std::vector<Value> batch_norm(LoweringContext& ctx, const BatchNormArgs& a, bool update,
                              size_t stats_out = 3) {
  FunctionBuilder& b = ctx.b;
  Value x_in = ctx.tensor(0);
  ElementType acc = opmath_type(x_in.dtype());
  Value x = b.convert(x_in, acc);
  std::vector<int64_t> dims = batch_norm_dims(x);
  std::vector<Value> r;
  Value mean, invstd;
  std::optional<Value> dev;  // training: x - mean, from the statistics' own pass
  if (a.training) {
    Stats s = moments(b, x, dims);
    mean = s.mean;
    dev = s.dev;
    invstd = rsqrt_eps(b, s.var, a.eps);
    if (update) {
      double n = static_cast<double>(reduced_count(x, dims));
      for (size_t i : {a.running_mean, a.running_var}) {
        Value old = ctx.tensor(i);
        Value stat =
            i == a.running_mean ? s.mean : b.mul(s.var, cst(b, n / std::max(n - 1, 1.0), s.var));
        stat = b.convert(stat, old.dtype());
        Value m = b.constant(a.momentum, old.type);
        Value keep = b.constant(1 - a.momentum, old.type);
        r.push_back(b.add(b.mul(keep, old), b.mul(m, stat)));
      }
    }
  } else {
    TORCH_CHECK(!ctx.is_none(a.running_mean) && !ctx.is_none(a.running_var),
                "torchtpu lowering: ", ctx.schema().name(),
                ": running_mean and running_var must be defined in evaluation mode");
    mean = b.convert(ctx.tensor(a.running_mean), acc);
    invstd = rsqrt_eps(b, b.convert(ctx.tensor(a.running_var), acc), a.eps);
  }
  // Evaluation: y = x * alpha + beta with alpha = invstd * weight and beta = bias - mean * alpha
  // per channel, as the CPU kernels transform the input. Training: y = (x - mean) * alpha + bias
  // from the deviations the statistics were computed with, which keeps its accuracy at large
  // means (x * alpha - mean * alpha cancels there). Either way the same NaNs come out as on the
  // CPU: a zero variance with eps = 0 makes alpha inf and every deviation 0, NaN throughout.
  Value alpha = invstd;
  if (!ctx.is_none(a.weight)) alpha = b.mul(alpha, b.convert(ctx.tensor(a.weight), acc));
  Value y;
  if (dev) {
    y = b.mul(*dev, back(b, alpha, x.shape(), dims));
    if (!ctx.is_none(a.bias)) {
      y = b.add(y, back(b, b.convert(ctx.tensor(a.bias), acc), x.shape(), dims));
    }
  } else {
    Value beta = b.neg(b.mul(mean, alpha));
    if (!ctx.is_none(a.bias)) {
      beta = b.sub(b.convert(ctx.tensor(a.bias), acc), b.mul(mean, alpha));
    }
    y = b.add(b.mul(x, back(b, alpha, x.shape(), dims)), back(b, beta, x.shape(), dims));
  }
  std::vector<Value> out{coerce(b, y, ctx.out_type(0)), coerce(b, mean, ctx.out_type(1)),
                         coerce(b, invstd, ctx.out_type(2))};
  for (size_t i = 0; i < r.size(); ++i) {
    out.push_back(coerce(b, r[i], ctx.out_type(stats_out + i)));
  }
  return out;
}

// native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
// Its eager kernel (below) routes training with running stats to the functional form, which
// returns the updated statistics; here the statistics are left alone.
std::vector<Value> lower_native_batch_norm(LoweringContext& ctx) {
  BatchNormArgs a{1, 2, 3, 4, ctx.bool_arg(5), ctx.double_arg(6), ctx.double_arg(7)};
  return batch_norm(ctx, a, false);
}

// _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
//                                     training, momentum, eps)
//   -> (out, save_mean, save_rstd, running_mean_out, running_var_out)
std::vector<Value> lower_batch_norm_functional(LoweringContext& ctx) {
  BatchNormArgs a{1, 2, 3, 4, ctx.bool_arg(5), ctx.double_arg(6), ctx.double_arg(7)};
  if (a.training) return batch_norm(ctx, a, true);
  std::vector<Value> r = batch_norm(ctx, a, false);
  r.push_back(coerce(ctx.b, ctx.tensor(3), ctx.out_type(3)));
  r.push_back(coerce(ctx.b, ctx.tensor(4), ctx.out_type(4)));
  return r;
}

// _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var,
//                                      momentum, eps)
std::vector<Value> lower_batch_norm_no_training(LoweringContext& ctx) {
  BatchNormArgs a{1, 2, 3, 4, false, ctx.double_arg(5), ctx.double_arg(6)};
  return batch_norm(ctx, a, false);
}

// _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
std::vector<Value> lower_batch_norm_no_stats(LoweringContext& ctx) {
  TORCH_CHECK(ctx.bool_arg(3), "torchtpu lowering: ", ctx.schema().name(),
              ": evaluation mode needs running statistics");
  BatchNormArgs a{1, 2, 0, 0, true, ctx.double_arg(4), ctx.double_arg(5)};
  return batch_norm(ctx, a, false);
}

// The empty uint8 `reserve` output of the _batch_norm_with_update family (cuDNN's workspace).
Value empty_reserve(LoweringContext& ctx, size_t i) { return zeros(ctx.b, ctx.out_type(i)); }

// _batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum,
//                                    eps) -> (out, save_mean, save_rstd, reserve,
//                                             running_mean_out, running_var_out)
std::vector<Value> lower_batch_norm_with_update_functional(LoweringContext& ctx) {
  BatchNormArgs a{1, 2, 3, 4, true, ctx.double_arg(5), ctx.double_arg(6)};
  std::vector<Value> r = batch_norm(ctx, a, true, 4);
  return {r[0], r[1], r[2], empty_reserve(ctx, 3), r[3], r[4]};
}

// _batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps)
//   -> (out, save_mean, save_rstd, reserve): running statistics when given, else batch ones.
std::vector<Value> lower_batch_norm_no_update(LoweringContext& ctx) {
  bool stats = !ctx.is_none(3) && !ctx.is_none(4);
  BatchNormArgs a{1, 2, 3, 4, !stats, ctx.double_arg(5), ctx.double_arg(6)};
  std::vector<Value> r = batch_norm(ctx, a, false);
  r.push_back(empty_reserve(ctx, 3));
  return r;
}

// torchtpu::batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum,
// eps) -> (out, save_mean, save_invstd, running_mean_out, running_var_out): every batch-norm
// form's eager forward (aten/batch_norm.cpp), typed by its meta kernel there with the CPU's
// dtypes. Without running statistics the last two are empty; in evaluation they are the given
// ones.
std::vector<Value> lower_tpu_batch_norm(LoweringContext& ctx) {
  BatchNormArgs a{1, 2, 3, 4, ctx.bool_arg(5), ctx.double_arg(6), ctx.double_arg(7)};
  const bool running = !ctx.is_none(3) && !ctx.is_none(4);
  std::vector<Value> r = batch_norm(ctx, a, a.training && running);
  if (r.size() == 3) {
    for (size_t i : {size_t{3}, size_t{4}}) {
      r.push_back(running ? coerce(ctx.b, ctx.tensor(i), ctx.out_type(i))
                          : zeros(ctx.b, ctx.out_type(i)));
    }
  }
  return r;
}

c10::List<bool> output_mask(const LoweringContext& ctx) {
  return ctx.arg(ctx.index_of("output_mask")).ivalue.toBoolList();
}

// native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
//                            save_invstd, train, eps, output_mask)
std::vector<Value> lower_batch_norm_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x_in = ctx.tensor(1);
  ElementType acc = opmath_type(x_in.dtype());
  Value x = b.convert(x_in, acc);
  Value g = b.convert(ctx.tensor(0), acc);
  bool train = ctx.bool_arg(7);
  double eps = ctx.double_arg(8);
  c10::List<bool> mask = output_mask(ctx);
  std::vector<int64_t> dims = batch_norm_dims(x);
  Value mean, invstd;
  if (train) {
    mean = b.convert(ctx.tensor(5), acc);
    invstd = b.convert(ctx.tensor(6), acc);
  } else {
    mean = b.convert(ctx.tensor(3), acc);
    invstd = rsqrt_eps(b, b.convert(ctx.tensor(4), acc), eps);
  }
  // In the CPU kernel's order: dotp = sum(g * (x - mean)) first, then scaled by invstd (a
  // zero variance with eps = 0 gives inf, not the NaN of summing +-inf terms).
  const std::vector<int64_t>& shape = x.shape();
  Value d = b.sub(x, back(b, mean, shape, dims));
  Value sum_g = sum(b, g, dims);
  Value dotp = sum(b, b.mul(g, d), dims);
  Value sum_gx = b.mul(dotp, invstd);
  std::vector<std::optional<Value>> r(3);
  if (mask.get(0)) {
    Value scale = invstd;
    if (!ctx.is_none(2)) scale = b.mul(scale, b.convert(ctx.tensor(2), acc));
    Value gi = g;
    if (train) {
      double n = static_cast<double>(reduced_count(x, dims));
      Value mg = b.div(sum_g, cst(b, n, sum_g));
      Value k = b.div(b.mul(b.mul(dotp, invstd), invstd), cst(b, n, dotp));
      gi = b.sub(b.sub(g, back(b, mg, shape, dims)), b.mul(d, back(b, k, shape, dims)));
    }
    r[0] = b.mul(gi, back(b, scale, shape, dims));
  }
  if (mask.get(1)) r[1] = sum_gx;
  if (mask.get(2)) r[2] = sum_g;
  return masked_results(ctx, r);
}

// ---- layer norm ----

std::vector<int64_t> trailing_dims(const Value& x, size_t k) {
  std::vector<int64_t> dims;
  for (int64_t d = x.rank() - static_cast<int64_t>(k); d < x.rank(); ++d) dims.push_back(d);
  return dims;
}

// Weight/bias of the normalized (trailing) shape, broadcast over the leading dims.
std::optional<Value> trailing(LoweringContext& ctx, size_t i, ElementType t,
                              const std::vector<int64_t>& shape, size_t k) {
  if (ctx.is_none(i)) return std::nullopt;
  std::vector<int64_t> dims;
  for (size_t d = shape.size() - k; d < shape.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  return ctx.b.broadcast_in_dim(ctx.b.convert(ctx.tensor(i), t), shape, dims);
}

// native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)
std::vector<Value> lower_layer_norm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x_in = ctx.tensor(0);
  size_t k = ctx.int_list(1).size();
  ElementType acc = opmath_type(x_in.dtype());
  Value x = b.convert(x_in, acc);
  if (x.type.numel() == 0) {
    return {zeros(b, ctx.out_type(0)), zeros(b, ctx.out_type(1)), zeros(b, ctx.out_type(2))};
  }
  std::vector<int64_t> dims = trailing_dims(x, k);
  Stats s = moments(b, x, dims);
  Value rstd = rsqrt_eps(b, s.var, ctx.double_arg(4));
  Value y = b.mul(s.dev, back(b, rstd, x.shape(), dims));
  if (auto w = trailing(ctx, 2, acc, x.shape(), k)) y = b.mul(y, *w);
  if (auto bias = trailing(ctx, 3, acc, x.shape(), k)) y = b.add(y, *bias);
  return {coerce(b, y, ctx.out_type(0)),
          coerce(b, b.reshape(s.mean, ctx.out_type(1).shape), ctx.out_type(1)),
          coerce(b, b.reshape(rstd, ctx.out_type(2).shape), ctx.out_type(2))};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
//                            output_mask)
std::vector<Value> lower_layer_norm_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x_in = ctx.tensor(1);
  size_t k = ctx.int_list(2).size();
  ElementType acc = opmath_type(x_in.dtype());
  Value x = b.convert(x_in, acc);
  Value go = b.convert(ctx.tensor(0), acc);
  c10::List<bool> mask = output_mask(ctx);
  std::vector<int64_t> dims = trailing_dims(x, k), outer;
  for (int64_t d = 0; d < x.rank() - static_cast<int64_t>(k); ++d) outer.push_back(d);
  const std::vector<int64_t>& shape = x.shape();
  // mean/rstd arrive as (outer..., 1...): broadcast them over the trailing dims.
  std::vector<int64_t> outer_shape(shape.begin(), shape.end() - static_cast<int64_t>(k));
  Value mean = back(b, b.reshape(b.convert(ctx.tensor(3), acc), outer_shape), shape, dims);
  Value rstd = back(b, b.reshape(b.convert(ctx.tensor(4), acc), outer_shape), shape, dims);
  Value xhat = b.mul(b.sub(x, mean), rstd);
  std::vector<std::optional<Value>> r(3);
  if (mask.get(0)) {
    Value g = go;
    if (auto w = trailing(ctx, 5, acc, shape, k)) g = b.mul(g, *w);
    double n = static_cast<double>(std::max<int64_t>(reduced_count(x, dims), 1));
    Value mg = sum(b, g, dims);
    mg = b.div(mg, cst(b, n, mg));
    Value mgx = sum(b, b.mul(g, xhat), dims);
    mgx = b.div(mgx, cst(b, n, mgx));
    Value gi = b.sub(b.sub(g, back(b, mg, shape, dims)), b.mul(xhat, back(b, mgx, shape, dims)));
    r[0] = b.mul(gi, rstd);
  }
  // Without weight (bias) there is no weight (bias) gradient, whatever the mask says.
  if (mask.get(1) && !ctx.is_none(5)) r[1] = sum(b, b.mul(go, xhat), outer);
  if (mask.get(2) && !ctx.is_none(6)) r[2] = sum(b, go, outer);
  return masked_results(ctx, r);
}

// ---- group norm ----

// native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd)
std::vector<Value> lower_group_norm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x_in = ctx.tensor(0);
  int64_t n = ctx.int_arg(3), c = ctx.int_arg(4), hw = ctx.int_arg(5), g = ctx.int_arg(6);
  ElementType acc = opmath_type(x_in.dtype());
  if (x_in.type.numel() == 0) {
    return {zeros(b, ctx.out_type(0)), zeros(b, ctx.out_type(1)), zeros(b, ctx.out_type(2))};
  }
  Value x = b.reshape(b.convert(x_in, acc), {n, g, c / g, hw});
  Stats s = moments(b, x, {2, 3});
  Value rstd = rsqrt_eps(b, s.var, ctx.double_arg(7));
  Value y = b.mul(s.dev, back(b, rstd, x.shape(), {2, 3}));
  y = b.reshape(y, {n, c, hw});
  if (auto w = channel(ctx, 1, acc, y.shape(), 1)) y = b.mul(y, *w);
  if (auto bias = channel(ctx, 2, acc, y.shape(), 1)) y = b.add(y, *bias);
  return {coerce(b, b.reshape(y, ctx.out_type(0).shape), ctx.out_type(0)),
          coerce(b, s.mean, ctx.out_type(1)), coerce(b, rstd, ctx.out_type(2))};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
//                            output_mask)
std::vector<Value> lower_group_norm_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x_in = ctx.tensor(1);
  int64_t n = ctx.int_arg(5), c = ctx.int_arg(6), hw = ctx.int_arg(7), g = ctx.int_arg(8);
  ElementType acc = opmath_type(x_in.dtype());
  c10::List<bool> mask = output_mask(ctx);
  std::vector<int64_t> shape{n, g, c / g, hw};
  Value x = b.reshape(b.convert(x_in, acc), shape);
  Value go = b.reshape(b.convert(ctx.tensor(0), acc), shape);
  Value mean = b.broadcast_in_dim(b.convert(ctx.tensor(2), acc), shape, {0, 1});
  Value rstd = b.broadcast_in_dim(b.convert(ctx.tensor(3), acc), shape, {0, 1});
  Value xhat = b.mul(b.sub(x, mean), rstd);
  std::vector<std::optional<Value>> r(3);
  if (mask.get(0)) {
    Value gw = go;
    if (!ctx.is_none(4)) {
      Value w = b.reshape(b.convert(ctx.tensor(4), acc), {g, c / g});
      gw = b.mul(gw, b.broadcast_in_dim(w, shape, {1, 2}));
    }
    double m = static_cast<double>(std::max<int64_t>(c / g * hw, 1));
    Value mg = sum(b, gw, {2, 3});
    mg = b.div(mg, cst(b, m, mg));
    Value mgx = sum(b, b.mul(gw, xhat), {2, 3});
    mgx = b.div(mgx, cst(b, m, mgx));
    Value gi =
        b.sub(b.sub(gw, back(b, mg, shape, {2, 3})), b.mul(xhat, back(b, mgx, shape, {2, 3})));
    r[0] = b.mul(gi, rstd);
  }
  auto per_channel = [&](Value v) { return b.reshape(sum(b, v, {0, 3}), {c}); };
  if (mask.get(1)) r[1] = per_channel(b.mul(go, xhat));
  if (mask.get(2)) r[2] = per_channel(go);
  return masked_results(ctx, r);
}

TORCHTPU_LOWERING("aten::native_batch_norm", lower_native_batch_norm);
TORCHTPU_LOWERING("aten::_native_batch_norm_legit_functional", lower_batch_norm_functional);
TORCHTPU_LOWERING("aten::_native_batch_norm_legit_no_training", lower_batch_norm_no_training);
TORCHTPU_LOWERING("aten::_native_batch_norm_legit.no_stats", lower_batch_norm_no_stats);
TORCHTPU_LOWERING("aten::_batch_norm_with_update_functional",
                  lower_batch_norm_with_update_functional);
TORCHTPU_LOWERING("aten::_batch_norm_no_update", lower_batch_norm_no_update);
TORCHTPU_LOWERING("torchtpu::batch_norm", lower_tpu_batch_norm);
TORCHTPU_LOWERING("aten::native_batch_norm_backward", lower_batch_norm_backward);
// Same arguments up to output_mask (save_var holds the inverse std, update means training).
TORCHTPU_LOWERING("aten::batch_norm_backward", lower_batch_norm_backward);
TORCHTPU_LOWERING("aten::native_layer_norm", lower_layer_norm);
TORCHTPU_LOWERING("aten::native_layer_norm_backward", lower_layer_norm_backward);
TORCHTPU_LOWERING("aten::native_group_norm", lower_group_norm);
TORCHTPU_LOWERING("aten::native_group_norm_backward", lower_group_norm_backward);

}  // namespace
}  // namespace torchtpu::lowering
