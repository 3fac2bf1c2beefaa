// multinomial(self, num_samples, replacement, *, generator) from the op's tpu generator.
// Without replacement it is PyTorch's own method: the top num_samples of p / q with q ~ Exp(1)
// (an exponential race). With replacement each draw inverts the normalized cumulative
// distribution at a uniform u, which never lands on a zero-probability category. The streams
// differ from CPU's, the distributions do not.
//
// The CPU also checks the probabilities' values (negative, inf/NaN, rows summing to zero), which
// a lowering cannot raise on: the tpu kernel below runs a small reduction program,
// torchtpu::multinomial_check, and reads its 0-d code (one sync per call; the CPU kernel makes
// the same checks, as CUDA's does with a sync of its own when drawing without replacement).
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>

#include "lowering/lowering.h"
#include "lowering/random_bits.h"
#include "lowering/sorting.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

std::vector<Value> lower_multinomial(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value p = ctx.tensor(0);
  int64_t k = ctx.int_arg(1);
  bool replacement = ctx.bool_arg(2);
  const TensorType& out = ctx.out_type();
  TORCH_CHECK(p.rank() == 1 || p.rank() == 2, "prob_dist must be 1 or 2 dim");
  int64_t n = p.shape().back();
  TORCH_CHECK(n > 0, "multinomial: number of categories cannot be zero");
  TORCH_CHECK(k > 0, "cannot sample n_sample <= 0 samples");
  TORCH_CHECK(replacement || k <= n,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (out.numel() == 0) return {b.constant_int(0, out)};
  int64_t r = p.rank() == 2 ? p.shape()[0] : 1;
  ElementType ct = p.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  int digits = ct == ElementType::kF64 ? 53 : 24;
  Value probs = b.reshape(b.convert(p, ct), {r, n});
  const LArg& g = ctx.arg(ctx.index_of("generator"));
  TORCH_CHECK(
      g.kind == LArg::Kind::kGenerator,
      "torchtpu lowering: multinomial: the generator state did not arrive as a runtime value");
  Value state = g.value;
  Value idx;
  if (!replacement) {
    TensorType t(ct, {r, n});
    Value u = uniform01_from_state(b, state, {r, n}, ct, digits);
    Value q = b.neg(b.unary("stablehlo.log_plus_one", b.neg(u)));  // Exp(1), -log(1 - u)
    Value key = b.div(probs, q);
    Value order = sort_with_indices(b, key, 1, /*descending=*/true)[1];
    idx = b.slice(order, {0, 0}, {r, k}, {1, 1});
  } else {
    Value cdf_rows;
    std::vector<Value> rows;
    for (int64_t i = 0; i < r; ++i) {
      rows.push_back(b.reshape(
          prefix_sum(b, b.reshape(b.slice(probs, {i, 0}, {i + 1, n}, {1, 1}), {n})), {1, n}));
    }
    cdf_rows = rows.size() == 1 ? rows[0] : b.concatenate(rows, 0);
    Value total = b.slice(cdf_rows, {0, n - 1}, {r, n}, {1, 1});  // (r, 1)
    Value u = uniform01_from_state(b, state, {r, k}, ct, digits);
    Value target = b.mul(u, b.broadcast_in_dim(b.reshape(total, {r}), {r, k}, {0}));
    std::vector<int64_t> shape{r, k, n};
    Value le = b.compare(b.broadcast_in_dim(cdf_rows, shape, {0, 2}),
                         b.broadcast_in_dim(target, shape, {0, 1}), CompareDirection::kLE);
    idx =
        b.reduce_simple(b.convert(le, ElementType::kS64),
                        b.constant_int(0, TensorType(ElementType::kS64, {})), {2}, "stablehlo.add");
    // Rounding can leave u * total at the last cumulative sum: take the last nonzero category.
    Value nz = b.compare(probs, b.constant(0, TensorType(ct, {r, n})), CompareDirection::kGT);
    Value last_nz = b.reduce_simple(
        b.select(nz, b.iota(TensorType(ElementType::kS64, {r, n}), 1),
                 b.constant_int(0, TensorType(ElementType::kS64, {r, n}))),
        b.constant_int(0, TensorType(ElementType::kS64, {})), {1}, "stablehlo.maximum");
    idx = b.min(idx, b.broadcast_in_dim(last_nz, {r, k}, {0}));
  }
  return {coerce(b, b.reshape(idx, out.shape), out)};
}

// multinomial_check(self (R, N) or (N,), fast) -> int64 0-d code of the CPU's first error:
// 0 none; the sampling path without replacement (or one sample), `fast`, checks every value
// first (1: inf, NaN or negative), then the row sums (2: a row of zeros). The path with
// replacement checks row by row, each value in order (3: not >= 0, NaN included; 4: inf), then
// that row's sum (2): the code with the smallest position wins.
std::vector<Value> lower_multinomial_check(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value p = ctx.tensor(0);
  bool fast = ctx.bool_arg(1);
  int64_t n = p.shape().back();
  int64_t r = p.rank() == 2 ? p.shape()[0] : 1;
  ElementType ct = p.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  TensorType t(ct, {r, n}), s64(ElementType::kS64, {r, n}), s64_r(ElementType::kS64, {r});
  TensorType scalar(ElementType::kS64, {});
  Value x = b.reshape(b.convert(p, ct), {r, n});
  Value nonneg = b.compare(x, b.constant(0, t), CompareDirection::kGE);
  Value below_inf =
      b.compare(x, b.constant(std::numeric_limits<double>::infinity(), t), CompareDirection::kLT);
  // Every value >= 0 (where it matters), so a row sums to zero exactly when its max is zero.
  Value row_zero =
      b.compare(b.reduce_simple(x, b.constant(0, TensorType(ct, {})), {1}, "stablehlo.maximum"),
                b.constant(0, TensorType(ct, {r})), CompareDirection::kEQ);
  auto any = [&](Value pred) {
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < pred.rank(); ++i) dims.push_back(i);
    return b.compare(b.reduce_simple(b.convert(pred, ElementType::kS64), b.constant_int(0, scalar),
                                     dims, "stablehlo.maximum"),
                     b.constant_int(0, scalar), CompareDirection::kGT);
  };
  if (fast) {
    Value bad = any(b.unary("stablehlo.not", b.binary("stablehlo.and", nonneg, below_inf)));
    Value code = b.select(any(row_zero), b.constant_int(2, scalar), b.constant_int(0, scalar));
    return {coerce(b, b.select(bad, b.constant_int(1, scalar), code), ctx.out_type())};
  }
  // key = position * 8 + code, positions row-major with each row's sum after its n values.
  const int64_t none = std::numeric_limits<int64_t>::max();
  Value elem_code =
      b.select(nonneg, b.select(below_inf, b.constant_int(0, s64), b.constant_int(4, s64)),
               b.constant_int(3, s64));
  Value elem_pos = b.add(b.mul(b.iota(s64, 0), b.constant_int(n + 1, s64)), b.iota(s64, 1));
  Value elem_key = b.select(b.compare(elem_code, b.constant_int(0, s64), CompareDirection::kEQ),
                            b.constant_int(none, s64),
                            b.add(b.mul(elem_pos, b.constant_int(8, s64)), elem_code));
  Value row_pos =
      b.add(b.mul(b.iota(s64_r, 0), b.constant_int(n + 1, s64_r)), b.constant_int(n, s64_r));
  Value row_key =
      b.select(row_zero, b.add(b.mul(row_pos, b.constant_int(8, s64_r)), b.constant_int(2, s64_r)),
               b.constant_int(none, s64_r));
  Value first =
      b.min(b.reduce_simple(elem_key, b.constant_int(none, scalar), {0, 1}, "stablehlo.minimum"),
            b.reduce_simple(row_key, b.constant_int(none, scalar), {0}, "stablehlo.minimum"));
  Value code = b.select(b.compare(first, b.constant_int(none, scalar), CompareDirection::kEQ),
                        b.constant_int(0, scalar),
                        b.binary("stablehlo.and", first, b.constant_int(7, scalar)));
  return {coerce(b, code, ctx.out_type())};
}

TORCHTPU_LOWERING("aten::multinomial", lower_multinomial);
TORCHTPU_LOWERING("torchtpu::multinomial_check", lower_multinomial_check);

}  // namespace
}  // namespace torchtpu::lowering
