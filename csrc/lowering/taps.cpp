#include "lowering/taps.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "stablehlo/ops.h"

namespace torchtpu::lowering {

using shlo::ElementType;
using shlo::TensorType;
using shlo::Value;

Value dense_values(shlo::FunctionBuilder& b, const std::vector<double>& v,
                   const std::vector<int64_t>& shape, ElementType t) {
  return shlo::constant_values(b, v, TensorType(t, shape));
}

void Taps::add(size_t k, int64_t index, double weight) {
  idx[k].push_back(index);
  if (w.size() < idx.size()) w.resize(idx.size());
  w[k].push_back(weight);
}

namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// x gathered along `dim` at `index` (n, K) (entries in range): `dim` becomes (n, K).
Value gather_taps(shlo::FunctionBuilder& b, Value x, int64_t dim, Value index) {
  int64_t n = index.shape()[0], k = index.shape()[1];
  std::vector<int64_t> shape = x.shape(), slice = x.shape(), offset_dims;
  shape[static_cast<size_t>(dim)] = n;
  shape.insert(shape.begin() + dim + 1, k);
  slice[static_cast<size_t>(dim)] = 1;
  for (int64_t d = 0; d < x.rank() + 1; ++d) {
    if (d != dim && d != dim + 1) offset_dims.push_back(d);
  }
  return b.gather(x, b.reshape(index, {n, k, 1}), {offset_dims, {dim}, {dim}, 2}, slice,
                  x.type.with_shape(shape));
}

}  // namespace

Value Taps::apply(shlo::FunctionBuilder& b, Value x, int64_t dim) const {
  const int64_t n = out(), k = static_cast<int64_t>(idx.size());
  std::vector<double> index, weight;
  std::vector<double> present;
  bool absent = false;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < k; ++t) {
      int64_t j = idx[static_cast<size_t>(t)][static_cast<size_t>(i)];
      absent |= j < 0;
      index.push_back(static_cast<double>(std::max<int64_t>(j, 0)));
      present.push_back(j >= 0 ? 1 : 0);
      weight.push_back(w.empty() ? 1.0 : w[static_cast<size_t>(t)][static_cast<size_t>(i)]);
    }
  }
  Value g = gather_taps(b, x, dim, dense_values(b, index, {n, k}, ElementType::kS64));
  std::vector<int64_t> bdims{dim, dim + 1};
  if (!w.empty()) {
    g = b.mul(g, b.broadcast_in_dim(dense_values(b, weight, {n, k}, x.dtype()), g.shape(), bdims));
  }
  if (absent) {
    Value keep = b.broadcast_in_dim(
        b.convert(dense_values(b, present, {n, k}, ElementType::kS32), ElementType::kPred),
        g.shape(), bdims);
    g = b.select(keep, g, b.constant(0, g.type));
  }
  std::vector<int64_t> res = x.shape();
  res[static_cast<size_t>(dim)] = n;
  if (k == 1) return b.reshape(g, res);
  // Tap order, as the CPU kernels accumulate (a reduce may associate in any order).
  std::vector<int64_t> lo(static_cast<size_t>(g.rank()), 0), hi = g.shape(),
                                                             one(static_cast<size_t>(g.rank()), 1);
  std::optional<Value> sum;
  for (int64_t t = 0; t < k; ++t) {
    lo[static_cast<size_t>(dim + 1)] = t;
    hi[static_cast<size_t>(dim + 1)] = t + 1;
    Value term = b.reshape(b.slice(g, lo, hi, one), res);
    sum = sum ? b.add(*sum, term) : term;
  }
  return *sum;
}

Taps Taps::transposed() const {
  std::vector<std::vector<std::pair<int64_t, double>>> lists(static_cast<size_t>(in));
  const int64_t n = out();
  for (int64_t i = 0; i < n; ++i) {
    for (size_t t = 0; t < idx.size(); ++t) {
      int64_t j = idx[t][static_cast<size_t>(i)];
      if (j < 0) continue;
      TORCH_INTERNAL_ASSERT(j < in, "torchtpu: tap index out of range");
      lists[static_cast<size_t>(j)].emplace_back(i, w.empty() ? 1.0 : w[t][static_cast<size_t>(i)]);
    }
  }
  size_t k = 1;
  for (const auto& l : lists) k = std::max(k, l.size());
  Taps r(k, n);
  r.w.assign(k, {});
  for (const auto& l : lists) {
    for (size_t t = 0; t < k; ++t) {
      r.idx[t].push_back(t < l.size() ? l[t].first : -1);
      r.w[t].push_back(t < l.size() ? l[t].second : 0.0);
    }
  }
  return r;
}

}  // namespace torchtpu::lowering
