// multinomial(self, num_samples, replacement, *, generator) from the op's tpu generator.
// Without replacement it is PyTorch's own method: the top num_samples of p / q with q ~ Exp(1)
// (an exponential race). With replacement each draw inverts the normalized cumulative
// distribution at a uniform u, which never lands on a zero-probability category. The streams
// differ from CPU's, the distributions do not. The CPU's input checks that need the data
// (negative, non-finite or all-zero rows; too few nonzero categories) are not made here.
#include <cmath>

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

TORCHTPU_LOWERING("aten::multinomial", lower_multinomial);

}  // namespace
}  // namespace torchtpu::lowering
