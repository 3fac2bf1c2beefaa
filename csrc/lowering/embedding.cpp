// Embedding lookup (a row gather) and its dense gradient (a row scatter-add), with
// padding_idx rows left without gradient and scale_grad_by_freq dividing each row's gradient
// by how often its index occurs in the batch; embedding_bag (sum / mean / max over bags of
// indices) and its gradients.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <string>

#include "lowering/checks.h"
#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

// Row-wise scatter-add of `updates` (n, D) into `base` (V, D) at `rows` (n, 1).
Value scatter_rows(FunctionBuilder& b, Value base, Value rows, Value updates) {
  shlo::ScatterDims dims{{}, {0}, {0}, 1};
  if (base.rank() == 2) dims.update_window_dims = {1};
  return b.scatter(base, rows, updates, dims, add_region);
}

// An embedding's weight gradient: each of the n `updates` rows (n, d) added into row `rows[i]`
// (rows: (n, 1) s64) of a (v, d) zero table; scale_grad_by_freq divides every table row by how
// often its index occurs (at least 1, so rows no index reaches stay 0).
Value weight_grad(FunctionBuilder& b, Value rows, Value updates, int64_t v, bool scale_by_freq) {
  ElementType acc = updates.dtype();
  int64_t n = updates.shape()[0], d = updates.shape()[1];
  Value r = scatter_rows(b, zeros(b, TensorType(acc, {v, d})), rows, updates);
  if (!scale_by_freq) return r;
  Value counts = scatter_rows(b, zeros(b, TensorType(acc, {v})), rows,
                              b.broadcast_to(b.constant(1, TensorType(acc, {})), {n}));
  Value safe = b.max(counts, b.constant(1, counts.type));
  return b.div(r, b.broadcast_in_dim(safe, {v, d}, {0}));
}

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
std::vector<Value> lower_embedding(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value weight = ctx.tensor(0);
  Value indices = ctx.tensor(1);
  TORCH_CHECK(weight.rank() == 2, "'weight' must be 2-D");
  check_indices(ctx, indices, 0, weight.shape()[0], "index out of range in self");
  if (out.numel() == 0) return {zeros(b, out)};
  int64_t d = weight.shape()[1];
  std::vector<int64_t> ishape = indices.shape();
  ishape.push_back(1);
  Value idx = b.reshape(b.convert(indices, ElementType::kS64), ishape);
  std::vector<int64_t> shape = indices.shape();
  shape.push_back(d);
  shlo::GatherDims dims{{indices.rank()}, {0}, {0}, indices.rank()};
  return {coerce(b, b.gather(weight, idx, dims, {1, d}, weight.type.with_shape(shape)), out)};
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
std::vector<Value> lower_embedding_dense_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value grad = ctx.tensor(0);
  Value indices = ctx.tensor(1);
  int64_t v = ctx.int_arg(2);
  int64_t padding_idx = ctx.int_arg(3);
  bool scale = ctx.bool_arg(4);
  int64_t n = indices.type.numel();
  if (n == 0 || out.numel() == 0) return {zeros(b, out)};
  int64_t d = out.shape.at(1);
  // Half gradients accumulate in f32 and round once.
  ElementType acc = opmath_type(out.dtype);
  Value idx = b.reshape(b.convert(indices, ElementType::kS64), {n});
  Value g = b.reshape(b.convert(grad, acc), {n, d});
  TensorType idx_t(ElementType::kS64, {n});
  // padding_idx rows get no gradient: their updates become zeros.
  if (padding_idx >= 0) {
    Value keep = b.compare(idx, b.constant_int(padding_idx, idx_t), shlo::CompareDirection::kNE);
    g = b.select(b.broadcast_in_dim(keep, {n, d}, {0}), g, zeros(b, g.type));
  }
  return {coerce(b, weight_grad(b, b.reshape(idx, {n, 1}), g, v, scale), out)};
}

// ---- embedding_bag ----
// Bags are runs of `indices` starting at each offset. Every index's bag id comes from
// comparing its position with the offsets (recomputed in the backward from offsets, so the
// backward never depends on how the forward filled its auxiliary outputs).

enum BagMode { kSum = 0, kMean = 1, kMax = 2 };

struct Bags {
  Value bag;    // (n,) s64 bag id of every index
  Value valid;  // (n,) pred: not padding_idx
  Value size;   // (B,) s64 number of valid indices per bag
  int64_t n = 0, count = 0;
};

Bags bags_of(FunctionBuilder& b, Value indices, Value offsets, int64_t count, int64_t padding_idx) {
  Bags r;
  r.n = indices.type.numel();
  r.count = count;
  TensorType grid(ElementType::kS64, {r.n, count});
  Value pos = b.iota(grid, 0);
  Value off = b.slice(b.convert(b.reshape(offsets, {offsets.type.numel()}), ElementType::kS64), {0},
                      {count}, {1});
  Value started = b.convert(
      b.compare(b.broadcast_in_dim(off, {r.n, count}, {1}), pos, shlo::CompareDirection::kLE),
      ElementType::kS64);
  Value zero = b.constant_int(0, TensorType(ElementType::kS64, {}));
  Value bag = b.reduce_simple(started, zero, {1}, "stablehlo.add");
  r.bag = b.max(b.sub(bag, b.constant_int(1, bag.type)), b.constant_int(0, bag.type));
  Value idx = b.reshape(b.convert(indices, ElementType::kS64), {r.n});
  r.valid = padding_idx >= 0
                ? b.compare(idx, b.constant_int(padding_idx, idx.type), shlo::CompareDirection::kNE)
                : b.broadcast_to(b.constant(1, TensorType(ElementType::kPred, {})), {r.n});
  Value member = b.binary("stablehlo.and",
                          b.compare(b.broadcast_in_dim(r.bag, {r.n, count}, {0}), b.iota(grid, 1),
                                    shlo::CompareDirection::kEQ),
                          b.broadcast_in_dim(r.valid, {r.n, count}, {0}));
  r.size = b.reduce_simple(b.convert(member, ElementType::kS64), zero, {0}, "stablehlo.add");
  return r;
}

Value gather_rows(FunctionBuilder& b, Value table, Value rows) {
  int64_t n = rows.type.numel();
  std::vector<int64_t> shape{n};
  shlo::GatherDims dims{{}, {0}, {0}, 1};
  std::vector<int64_t> slice{1};
  if (table.rank() == 2) {
    shape.push_back(table.shape()[1]);
    slice.push_back(table.shape()[1]);
    dims.offset_dims = {1};
  }
  return b.gather(table, b.reshape(rows, {n, 1}), dims, slice, table.type.with_shape(shape));
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
//                per_sample_weights, include_last_offset, padding_idx)
//   -> (output, offset2bag, bag_size, max_indices)
std::vector<Value> lower_embedding_bag(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value weight = ctx.tensor(0);
  Value indices = ctx.tensor(1);
  Value offsets = ctx.tensor(2);
  int64_t mode = ctx.int_arg(4);
  bool has_psw = !ctx.is_none(6);
  int64_t padding_idx = ctx.int_arg(8);
  const TensorType& out = ctx.out_type(0);
  int64_t count = out.shape.at(0), d = out.shape.at(1);
  TORCH_CHECK(indices.rank() == 1, "torchtpu lowering: _embedding_bag: expected 1-D indices");
  int64_t num_weights = weight.shape().at(0);
  check_indices(ctx, indices, 0, num_weights,
                "an index of input takes value {} which is not in the valid range [0, " +
                    std::to_string(num_weights) + ")",
                /*index_error=*/false);
  ElementType acc = opmath_type(weight.dtype());
  Bags bags = bags_of(b, indices, offsets, count, padding_idx);
  int64_t n = bags.n;
  Value idx = b.reshape(b.convert(indices, ElementType::kS64), {n});
  Value rows =
      n > 0 ? b.convert(gather_rows(b, weight, idx), acc) : zeros(b, TensorType(acc, {0, d}));
  if (has_psw) {
    rows = b.mul(rows, b.broadcast_in_dim(b.convert(ctx.tensor(6), acc), {n, d}, {0}));
  }
  Value valid2 = b.broadcast_in_dim(bags.valid, {n, d}, {0});
  Value result, max_idx;
  if (mode == kMax) {
    // Dense (bag, index) membership; the winner is the larger value, then the earlier index.
    Value member = b.binary("stablehlo.and",
                            b.compare(b.broadcast_in_dim(bags.bag, {count, n}, {1}),
                                      b.iota(TensorType(ElementType::kS64, {count, n}), 0),
                                      shlo::CompareDirection::kEQ),
                            b.broadcast_in_dim(bags.valid, {count, n}, {1}));
    Value m3 = b.broadcast_in_dim(member, {count, n, d}, {0, 1});
    Value neg_inf = b.constant(-std::numeric_limits<double>::infinity(), TensorType(acc, {}));
    Value vals = b.select(m3, b.broadcast_in_dim(rows, {count, n, d}, {1, 2}),
                          b.broadcast_to(neg_inf, {count, n, d}));
    Value pos = b.iota(TensorType(ElementType::kS64, {count, n, d}), 1);
    Value big =
        b.constant_int(std::numeric_limits<int64_t>::max(), TensorType(ElementType::kS64, {}));
    std::vector<Value> r =
        b.reduce({vals, pos}, {neg_inf, big}, {1},
                 [](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
                   Value better = rb.compare(a[0], a[2], shlo::CompareDirection::kGT);
                   Value tie = rb.binary("stablehlo.and",
                                         rb.compare(a[0], a[2], shlo::CompareDirection::kEQ),
                                         rb.compare(a[1], a[3], shlo::CompareDirection::kLT));
                   Value pick = rb.binary("stablehlo.or", better, tie);
                   return {rb.select(pick, a[0], a[2]), rb.select(pick, a[1], a[3])};
                 });
    Value nonempty = b.broadcast_in_dim(
        b.compare(bags.size, b.constant_int(0, bags.size.type), shlo::CompareDirection::kGT),
        {count, d}, {0});
    result = b.select(nonempty, r[0], zeros(b, r[0].type));
    // The winning position's weight row; -1 for empty bags.
    Value safe_pos = b.select(nonempty, r[1], zeros(b, r[1].type));
    Value winner = gather_rows(b, idx, b.reshape(safe_pos, {count * d}));
    max_idx = b.select(nonempty, b.reshape(winner, {count, d}),
                       b.constant_int(-1, TensorType(ElementType::kS64, {count, d})));
  } else {
    rows = b.select(valid2, rows, zeros(b, rows.type));
    result =
        scatter_rows(b, zeros(b, TensorType(acc, {count, d})), b.reshape(bags.bag, {n, 1}), rows);
    if (mode == kMean) {
      Value size = b.convert(b.max(bags.size, b.constant_int(1, bags.size.type)), acc);
      result = b.div(result, b.broadcast_in_dim(size, {count, d}, {0}));
    }
    max_idx = zeros(b, ctx.out_type(3));
  }
  // With include_last_offset the meta kernel sizes bag_size like offsets: one more entry.
  Value size = bags.size;
  int64_t extra = ctx.out_type(2).numel() - count;
  if (extra > 0)
    size = b.pad(size, b.constant_int(0, TensorType(size.dtype(), {})), {0}, {extra}, {0});
  return {coerce(b, result, out), coerce(b, bags.bag, ctx.out_type(1)),
          coerce(b, size, ctx.out_type(2)), coerce(b, max_idx, ctx.out_type(3))};
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
//                         num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
//                         padding_idx)
std::vector<Value> lower_embedding_bag_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value grad = ctx.tensor(0);
  Value indices = ctx.tensor(1);
  int64_t v = ctx.int_arg(6);
  bool scale = ctx.bool_arg(7);
  int64_t mode = ctx.int_arg(8);
  TORCH_CHECK(!ctx.bool_arg(9),
              "torchtpu lowering: sparse embedding_bag gradients are not supported");
  int64_t padding_idx = ctx.int_arg(11);
  int64_t count = grad.shape()[0], d = grad.shape()[1];
  ElementType acc = opmath_type(out.dtype);
  Value g = b.convert(grad, acc);
  if (mode == kMax) {
    Value mi = b.reshape(b.convert(ctx.tensor(5), ElementType::kS64), {count * d, 1});
    Value col = b.reshape(b.iota(TensorType(ElementType::kS64, {count, d}), 1), {count * d, 1});
    Value keep = b.compare(mi, b.constant_int(0, mi.type), shlo::CompareDirection::kGE);
    // Empty bags contribute nothing: their max index is -1 (the lowering's forward) or 0 (the
    // CPU's form, which the eager kernel returns), so bag_size decides.
    Value bag_size = b.convert(ctx.tensor(4), ElementType::kS64);
    bag_size = b.slice(b.reshape(bag_size, {bag_size.type.numel()}), {0}, {count}, {1});
    Value nonempty =
        b.compare(bag_size, b.constant_int(0, bag_size.type), shlo::CompareDirection::kGT);
    keep = b.binary("stablehlo.and", keep,
                    b.reshape(b.broadcast_in_dim(nonempty, {count, d}, {0}), {count * d, 1}));
    Value coords = b.concatenate({b.max(mi, b.constant_int(0, mi.type)), col}, 1);
    Value upd = b.select(b.reshape(keep, {count * d}), b.reshape(g, {count * d}),
                         zeros(b, TensorType(acc, {count * d})));
    Value r = b.scatter(zeros(b, TensorType(acc, {v, d})), coords, upd, {{}, {0, 1}, {0, 1}, 1},
                        add_region);
    return {coerce(b, r, out)};
  }
  Bags bags = bags_of(b, indices, ctx.tensor(2), count, padding_idx);
  int64_t n = bags.n;
  if (n == 0) return {zeros(b, out)};
  Value rows = gather_rows(b, g, bags.bag);  // (n, d)
  if (mode == kMean) {
    Value size = b.convert(b.max(bags.size, b.constant_int(1, bags.size.type)), acc);
    rows = b.div(rows, b.broadcast_in_dim(gather_rows(b, size, bags.bag), {n, d}, {0}));
  }
  if (!ctx.is_none(10)) {
    rows = b.mul(rows, b.broadcast_in_dim(b.convert(ctx.tensor(10), acc), {n, d}, {0}));
  }
  rows = b.select(b.broadcast_in_dim(bags.valid, {n, d}, {0}), rows, zeros(b, rows.type));
  Value idx = b.reshape(b.convert(indices, ElementType::kS64), {n, 1});
  return {coerce(b, weight_grad(b, idx, rows, v, scale), out)};
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
//                                            padding_idx): <grad of the bag, weight row>.
std::vector<Value> lower_embedding_bag_psw_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value grad = ctx.tensor(0);
  Value weight = ctx.tensor(1);
  Value indices = ctx.tensor(2);
  TORCH_CHECK(ctx.int_arg(5) == kSum,
              "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  int64_t count = grad.shape()[0];
  Bags bags = bags_of(b, indices, ctx.tensor(3), count, ctx.int_arg(6));
  int64_t n = bags.n;
  if (n == 0) return {zeros(b, out)};
  ElementType acc = opmath_type(out.dtype);
  Value idx = b.reshape(b.convert(indices, ElementType::kS64), {n});
  Value rows = b.convert(gather_rows(b, weight, idx), acc);
  Value g = b.convert(gather_rows(b, grad, bags.bag), acc);
  Value dot =
      b.reduce_simple(b.mul(rows, g), b.constant(0, TensorType(acc, {})), {1}, "stablehlo.add");
  return {coerce(b, b.select(bags.valid, dot, zeros(b, dot.type)), out)};
}

// embedding_renorm(self, indices, max_norm, norm_type): every row of `self` that `indices`
// names and whose p-norm exceeds max_norm is scaled by max_norm / (norm + 1e-7), as CPU's
// in-place kernel does once per distinct index (the in-place op writes this result back).
std::vector<Value> lower_embedding_renorm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value table = ctx.tensor(0);
  Value indices = ctx.tensor(1);
  double max_norm = ctx.double_arg(2);
  double p = ctx.double_arg(3);
  TORCH_CHECK(table.rank() == 2, "embedding_renorm_: self must be 2-D");
  int64_t v = table.shape()[0], d = table.shape()[1];
  int64_t n = indices.type.numel();
  if (n == 0 || out.numel() == 0) return {coerce(b, table, out)};
  ElementType acc = opmath_type(table.dtype());
  Value x = b.convert(table, acc);
  Value a = b.unary("stablehlo.abs", x);
  TensorType scalar(acc, {});
  Value norm;
  if (std::isinf(p)) {
    double init = p > 0 ? 0.0 : std::numeric_limits<double>::infinity();
    norm = b.reduce_simple(a, b.constant(init, scalar), {1},
                           p > 0 ? "stablehlo.maximum" : "stablehlo.minimum");
  } else if (p == 0) {
    Value nonzero = b.convert(b.compare(a, zeros(b, a.type), shlo::CompareDirection::kNE), acc);
    norm = b.reduce_simple(nonzero, b.constant(0, scalar), {1}, "stablehlo.add");
  } else if (p == 1) {
    norm = b.reduce_simple(a, b.constant(0, scalar), {1}, "stablehlo.add");
  } else if (p == 2) {
    norm = b.unary("stablehlo.sqrt",
                   b.reduce_simple(b.mul(a, a), b.constant(0, scalar), {1}, "stablehlo.add"));
  } else {
    Value powered = b.binary("stablehlo.power", a, b.constant(p, a.type));
    Value sum = b.reduce_simple(powered, b.constant(0, scalar), {1}, "stablehlo.add");
    norm = b.binary("stablehlo.power", sum, b.constant(1.0 / p, sum.type));
  }
  // Which rows the indices name (duplicates count once, as in CPU's sorted unique loop).
  Value rows = b.reshape(b.convert(indices, ElementType::kS64), {n, 1});
  Value named = scatter_rows(b, zeros(b, TensorType(acc, {v})), rows,
                             b.broadcast_to(b.constant(1, scalar), {n}));
  Value limit = b.constant(max_norm, norm.type);
  Value over =
      b.binary("stablehlo.and", b.compare(named, zeros(b, named.type), shlo::CompareDirection::kGT),
               b.compare(norm, limit, shlo::CompareDirection::kGT));
  Value scale = b.div(limit, b.add(norm, b.constant(1e-7, norm.type)));
  scale = b.select(over, scale, b.constant(1, norm.type));
  return {coerce(b, b.mul(x, b.broadcast_in_dim(scale, {v, d}, {0})), out)};
}

TORCHTPU_LOWERING("aten::embedding", lower_embedding);
TORCHTPU_LOWERING("aten::embedding_renorm", lower_embedding_renorm);
TORCHTPU_LOWERING("aten::embedding_dense_backward", lower_embedding_dense_backward);
TORCHTPU_LOWERING("aten::_embedding_bag", lower_embedding_bag);
TORCHTPU_LOWERING("aten::_embedding_bag_forward_only", lower_embedding_bag);
TORCHTPU_LOWERING("aten::_embedding_bag_backward", lower_embedding_bag_backward);
TORCHTPU_LOWERING("aten::_embedding_bag_per_sample_weights_backward",
                  lower_embedding_bag_psw_backward);

}  // namespace
}  // namespace torchtpu::lowering
