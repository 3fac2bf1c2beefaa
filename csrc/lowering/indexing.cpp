// Indexing reads and writes on stablehlo.gather/scatter: advanced indexing (index.Tensor,
// index_put with accumulate), the dim-wise scatters (scatter, scatter_add, scatter_reduce),
// index_add/index_copy/index_fill/index_reduce, masked_scatter and take/put.
//
// Advanced indexing moves the indexed dims to the front (a transpose), builds one
// (broadcast shape..., k) coordinate tensor from the k index tensors, gathers or scatters
// whole slices of the remaining dims, and moves the broadcast dims to where PyTorch puts them:
// in place of the indexed dims when those are adjacent, first otherwise.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <string>

#include "lowering/checks.h"
#include "lowering/common.h"
#include "lowering/lowering.h"
#include "lowering/sorting.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

Value gather(FunctionBuilder& b, Value operand, Value indices,
             const std::vector<int64_t>& offset_dims, const std::vector<int64_t>& collapsed,
             const std::vector<int64_t>& start_index_map, int64_t index_vector_dim,
             const std::vector<int64_t>& slice_sizes, const TensorType& result) {
  return b.gather(operand, indices, {offset_dims, collapsed, start_index_map, index_vector_dim},
                  slice_sizes, result);
}

// How a scatter combines the existing element (a) with the update (b).
using Combine = std::function<Value(FunctionBuilder&, Value, Value)>;

Value scatter(FunctionBuilder& b, Value operand, Value indices, Value updates,
              const std::vector<int64_t>& update_window_dims,
              const std::vector<int64_t>& inserted_window_dims,
              const std::vector<int64_t>& scatter_dims_to_operand_dims, int64_t index_vector_dim,
              const Combine& combine) {
  return b.scatter(
      operand, indices, updates,
      {update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim},
      [&](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
        return {combine(rb, a[0], a[1])};
      });
}

Value replace_op(FunctionBuilder&, Value, Value upd) { return upd; }
Value add_op(FunctionBuilder& b, Value a, Value c) {
  return a.dtype() == ElementType::kPred ? b.binary("stablehlo.or", a, c) : b.add(a, c);
}
Value mul_op(FunctionBuilder& b, Value a, Value c) {
  return a.dtype() == ElementType::kPred ? b.binary("stablehlo.and", a, c) : b.mul(a, c);
}
// max/min that propagate NaN (stablehlo.maximum on XLA CPU returns the non-NaN operand).
Value extremum_op(FunctionBuilder& b, Value a, Value c, bool is_max) {
  if (!shlo::is_float(a.dtype())) {
    if (a.dtype() == ElementType::kPred) {
      return b.binary(is_max ? "stablehlo.or" : "stablehlo.and", a, c);
    }
    return is_max ? b.max(a, c) : b.min(a, c);
  }
  Value pick_a = b.binary("stablehlo.or",
                          b.compare(a, c, is_max ? CompareDirection::kGT : CompareDirection::kLT),
                          b.compare(a, a, CompareDirection::kNE));
  return b.select(pick_a, a, c);
}
Value max_op(FunctionBuilder& b, Value a, Value c) { return extremum_op(b, a, c, true); }
Value min_op(FunctionBuilder& b, Value a, Value c) { return extremum_op(b, a, c, false); }

// Index values as s64 with negative entries counted from the end of a dim of `size`.
Value wrap_index(FunctionBuilder& b, Value idx, int64_t size) {
  Value i = b.convert(idx, ElementType::kS64);
  Value zero = b.constant_int(0, i.type);
  Value neg = b.compare(i, zero, CompareDirection::kLT);
  return b.select(neg, b.add(i, b.constant_int(size, i.type)), i);
}

std::vector<int64_t> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    size_t lead = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[lead + i];
      if (s[i] != 1) {
        TORCH_CHECK_INDEX(o == 1 || o == s[i],
                          "shape mismatch: indexing tensors could not be "
                          "broadcast together");
        o = s[i];
      }
    }
  }
  return out;
}

// ---- advanced indexing ----

struct AdvancedIndex {
  std::vector<int64_t> perm;        // indexed dims first, then the rest
  std::vector<int64_t> bshape;      // broadcast shape of the index tensors
  std::vector<int64_t> rest_sizes;  // sizes of the dims not indexed
  Value coords;                     // (bshape..., k) s64
  int64_t k = 0;
  // Where PyTorch puts the broadcast dims among the rest: position of the first indexed dim
  // when the indexed dims are adjacent, else 0.
  int64_t insert_at = 0;
};

AdvancedIndex advanced_index(LoweringContext& ctx, const Value& x, size_t list_arg) {
  FunctionBuilder& b = ctx.b;
  const auto& entries = ctx.arg(list_arg).values;
  TORCH_CHECK_INDEX(static_cast<int64_t>(entries.size()) <= x.rank(),
                    "too many indices for tensor of dimension ", x.rank(), " (got ", entries.size(),
                    ")");
  AdvancedIndex ai;
  std::vector<int64_t> indexed;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]) continue;
    TORCH_CHECK_INDEX(
        entries[i]->dtype() != ElementType::kPred && entries[i]->dtype() != ElementType::kU8,
        "torchtpu lowering: ", ctx.schema().name(),
        ": boolean mask indices are only supported alone");
    indexed.push_back(static_cast<int64_t>(i));
    shapes.push_back(entries[i]->shape());
  }
  TORCH_CHECK_INDEX(!indexed.empty(), "torchtpu lowering: ", ctx.schema().name(),
                    ": at least one index must be a tensor");
  ai.k = static_cast<int64_t>(indexed.size());
  ai.bshape = broadcast_shapes(shapes);
  bool adjacent = indexed.back() - indexed.front() + 1 == ai.k;
  ai.insert_at = adjacent ? indexed.front() : 0;
  ai.perm = indexed;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (std::find(indexed.begin(), indexed.end(), d) == indexed.end()) {
      ai.perm.push_back(d);
      ai.rest_sizes.push_back(x.shape()[static_cast<size_t>(d)]);
    }
  }
  std::vector<int64_t> cshape = ai.bshape;
  cshape.push_back(1);
  std::vector<Value> parts;
  // _unsafe_index/_unsafe_index_put promise in-range indices (upsampling decompositions).
  bool checked = ctx.schema().name().find("_unsafe") == std::string::npos;
  for (int64_t d : indexed) {
    if (checked) {
      check_dim_indices(ctx, *entries[static_cast<size_t>(d)], d, x.shape()[static_cast<size_t>(d)],
                        /*allow_negative=*/true,
                        /*index_error=*/true);
    }
    Value idx = wrap_index(b, *entries[static_cast<size_t>(d)], x.shape()[static_cast<size_t>(d)]);
    parts.push_back(b.reshape(b.broadcast_to(idx, ai.bshape), cshape));
  }
  ai.coords = b.concatenate(parts, static_cast<int64_t>(ai.bshape.size()));
  return ai;
}

// Permutation from (bshape..., rest...) to PyTorch's result order.
std::vector<int64_t> result_perm(const AdvancedIndex& ai) {
  int64_t nb = static_cast<int64_t>(ai.bshape.size());
  int64_t nr = static_cast<int64_t>(ai.rest_sizes.size());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < ai.insert_at; ++i) perm.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) perm.push_back(i);
  for (int64_t i = ai.insert_at; i < nr; ++i) perm.push_back(nb + i);
  return perm;
}

std::vector<Value> lower_index(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  AdvancedIndex ai = advanced_index(ctx, x, 1);
  if (out.numel() == 0) return {zeros(b, out)};
  Value xt = b.transpose(x, ai.perm);
  int64_t nb = static_cast<int64_t>(ai.bshape.size());
  int64_t nr = static_cast<int64_t>(ai.rest_sizes.size());
  std::vector<int64_t> slice(static_cast<size_t>(ai.k), 1), shape = ai.bshape;
  slice.insert(slice.end(), ai.rest_sizes.begin(), ai.rest_sizes.end());
  shape.insert(shape.end(), ai.rest_sizes.begin(), ai.rest_sizes.end());
  Value g = gather(b, xt, ai.coords, range(nb, nb + nr), range(0, ai.k), range(0, ai.k), nb, slice,
                   x.type.with_shape(shape));
  return {coerce(b, b.transpose(g, result_perm(ai)), out)};
}

// x[mask] = values (or +=) for a single boolean mask over dims [d, d + mask.rank): element j
// of the selected ones takes values[j], which is found as the prefix count of the mask.
Value put_masked(LoweringContext& ctx, Value x, size_t d, Value mask, Value values,
                 bool accumulate) {
  FunctionBuilder& b = ctx.b;
  int64_t mr = mask.rank();
  for (int64_t i = 0; i < mr; ++i) {
    TORCH_CHECK_INDEX(
        d + static_cast<size_t>(i) < x.shape().size() &&
            mask.shape()[static_cast<size_t>(i)] == x.shape()[d + static_cast<size_t>(i)],
        "The shape of the mask ", c10::IntArrayRef(mask.shape()), " at index ", i,
        " does not match the shape of the indexed tensor ", c10::IntArrayRef(x.shape()),
        " at index ", d + static_cast<size_t>(i));
  }
  // x as (before..., M, after...) with the masked dims flattened into M.
  std::vector<int64_t> before(x.shape().begin(), x.shape().begin() + static_cast<int64_t>(d));
  std::vector<int64_t> after(x.shape().begin() + static_cast<int64_t>(d) + mr, x.shape().end());
  int64_t m = mask.type.numel();
  std::vector<int64_t> flat = before;
  flat.push_back(m);
  flat.insert(flat.end(), after.begin(), after.end());
  Value xf = b.reshape(x, flat);
  Value mf = b.reshape(b.convert(mask, ElementType::kPred), {m});
  // values broadcast against (before..., nnz, after...) where nnz is values' own size there.
  std::vector<int64_t> vshape = flat;
  int64_t lead = static_cast<int64_t>(flat.size()) - values.rank();
  size_t pos = before.size();
  int64_t nnz = 1;
  if (static_cast<int64_t>(pos) >= lead) nnz = values.shape()[pos - static_cast<size_t>(lead)];
  vshape[pos] = nnz;
  Value v = b.broadcast_to(b.convert(values, x.dtype()), vshape);
  Value picked;
  if (nnz == 1) {
    picked = b.broadcast_to(v, flat);
  } else {
    Value count = prefix_sum(b, b.convert(mf, ElementType::kS64));
    Value rank = b.sub(count, b.constant_int(1, count.type));
    rank = b.clamp(b.constant_int(0, TensorType(ElementType::kS64, {})), rank,
                   b.constant_int(nnz - 1, TensorType(ElementType::kS64, {})));
    std::vector<int64_t> slice = vshape;
    slice[pos] = 1;
    std::vector<int64_t> offset_dims;
    for (int64_t i = 0; i < static_cast<int64_t>(flat.size()); ++i) {
      if (i != static_cast<int64_t>(pos)) offset_dims.push_back(i);
    }
    picked = gather(b, v, b.reshape(rank, {m, 1}), offset_dims, {static_cast<int64_t>(pos)},
                    {static_cast<int64_t>(pos)}, 1, slice, x.type.with_shape(flat));
  }
  Value sel = b.broadcast_in_dim(mf, flat, {static_cast<int64_t>(pos)});
  Value r = accumulate ? b.select(sel, add_op(b, xf, picked), xf) : b.select(sel, picked, xf);
  return b.reshape(r, x.shape());
}

// index_put(self, indices, values, accumulate) and _index_put_impl(..., accumulate, unsafe)
std::vector<Value> lower_index_put(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = ctx.tensor(0);
  Value values = ctx.tensor(2);
  bool accumulate = ctx.bool_arg(3);
  const auto& entries = ctx.arg(1).values;
  // A lone boolean mask (x[mask] = v) is a select.
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]) continue;
    if (entries[i]->dtype() == ElementType::kPred || entries[i]->dtype() == ElementType::kU8) {
      size_t present = 0;
      for (const auto& e : entries) present += e ? 1 : 0;
      TORCH_CHECK_INDEX(present == 1, "torchtpu lowering: ", ctx.schema().name(),
                        ": a boolean mask index must be the only tensor index");
      return {coerce(b, put_masked(ctx, x, i, *entries[i], values, accumulate), out)};
    }
  }
  AdvancedIndex ai = advanced_index(ctx, x, 1);
  if (x.type.numel() == 0 || product(ai.bshape) == 0) return {coerce(b, x, out)};
  // values broadcast to the indexing result, then laid out as (bshape..., rest...).
  std::vector<int64_t> rperm = result_perm(ai);
  std::vector<int64_t> bfirst = ai.bshape;
  bfirst.insert(bfirst.end(), ai.rest_sizes.begin(), ai.rest_sizes.end());
  std::vector<int64_t> rshape;
  for (int64_t p : rperm) rshape.push_back(bfirst[static_cast<size_t>(p)]);
  Value v = b.broadcast_to(b.convert(values, x.dtype()), rshape);
  v = b.transpose(v, inverse(rperm));
  int64_t n = product(ai.bshape);
  std::vector<int64_t> ushape{n};
  ushape.insert(ushape.end(), ai.rest_sizes.begin(), ai.rest_sizes.end());
  v = b.reshape(v, ushape);
  Value coords = b.reshape(ai.coords, {n, ai.k});
  Value xt = b.transpose(x, ai.perm);
  int64_t nr = static_cast<int64_t>(ai.rest_sizes.size());
  Value r = scatter(b, xt, coords, v, range(1, 1 + nr), range(0, ai.k), range(0, ai.k), 1,
                    accumulate ? Combine(add_op) : Combine(replace_op));
  return {coerce(b, b.transpose(r, inverse(ai.perm)), out)};
}

// ---- dim-wise scatter ----

// Coordinates (n, rank) of every element of `index`, with dim `dim` replaced by its value.
Value element_coords(FunctionBuilder& b, Value index, int64_t dim) {
  int64_t r = index.rank();
  std::vector<int64_t> cshape = index.shape();
  cshape.push_back(1);
  TensorType ct(ElementType::kS64, cshape);
  Value idx = b.reshape(b.convert(index, ElementType::kS64), cshape);
  std::vector<Value> coords;
  for (int64_t d = 0; d < r; ++d) coords.push_back(d == dim ? idx : b.iota(ct, d));
  return b.reshape(b.concatenate(coords, r), {index.type.numel(), r});
}

enum class Reduce { kNone, kSum, kProd, kMax, kMin, kMean };

Reduce parse_reduce(const LoweringContext& ctx, const std::string& s) {
  if (s == "sum" || s == "add") return Reduce::kSum;
  if (s == "prod" || s == "multiply") return Reduce::kProd;
  if (s == "amax") return Reduce::kMax;
  if (s == "amin") return Reduce::kMin;
  if (s == "mean") return Reduce::kMean;
  TORCH_CHECK(false, "torchtpu lowering: ", ctx.schema().name(), ": unknown reduce '", s, "'");
}

Combine combine_for(Reduce r) {
  switch (r) {
    case Reduce::kNone:
      return replace_op;
    case Reduce::kSum:
    case Reduce::kMean:
      return add_op;
    case Reduce::kProd:
      return mul_op;
    case Reduce::kMax:
      return max_op;
    case Reduce::kMin:
      return min_op;
  }
  return replace_op;
}

// The smallest (lowest) or largest value of an integer type.
int64_t int_limit(ElementType t, bool lowest) {
  int bits = shlo::bit_width(t);
  if (shlo::is_unsigned_int(t)) {
    return lowest ? 0 : bits >= 63 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << bits) - 1;
  }
  if (bits >= 64) {
    return lowest ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  }
  return lowest ? -(int64_t{1} << (bits - 1)) : (int64_t{1} << (bits - 1)) - 1;
}

// The value a reduction starts from, for include_self=False.
Value identity(FunctionBuilder& b, Reduce r, const TensorType& t) {
  TensorType s(t.dtype, {});
  double inf = std::numeric_limits<double>::infinity();
  bool fp = shlo::is_float(t.dtype), pred = t.dtype == ElementType::kPred;
  Value v;
  if (r == Reduce::kProd) {
    v = b.constant(1, s);
  } else if (r == Reduce::kMax) {
    v = fp     ? b.constant(-inf, s)
        : pred ? b.constant(0, s)
               : b.constant_int(int_limit(t.dtype, true), s);
  } else if (r == Reduce::kMin) {
    v = fp     ? b.constant(inf, s)
        : pred ? b.constant(1, s)
               : b.constant_int(int_limit(t.dtype, false), s);
  } else {
    v = b.constant(0, s);
  }
  return b.broadcast_to(v, t.shape);
}

// sum / count; integer means round toward -inf, like the CPU kernels' floor division.
Value mean_of(FunctionBuilder& b, Value sum, Value count) {
  Value q = b.div(sum, count);
  if (shlo::is_float(sum.dtype())) return q;
  Value rem = b.binary("stablehlo.remainder", sum, count);
  Value zero = zeros(b, sum.type);
  Value fix = b.binary("stablehlo.and", b.compare(rem, zero, CompareDirection::kNE),
                       b.compare(sum, zero, CompareDirection::kLT));
  return b.select(fix, b.sub(q, b.constant(1, q.type)), q);
}

// self.scatter*(dim, index, src) where `src` is a tensor of at least index's shape or a 0-d
// value; reduce kNone replaces.
Value scatter_dim(LoweringContext& ctx, Value self, int64_t dim, Value index, Value src,
                  bool src_is_scalar, Reduce reduce, bool include_self) {
  FunctionBuilder& b = ctx.b;
  check_dim_indices(ctx, index, dim, self.rank() == 0 ? 1 : self.shape()[static_cast<size_t>(dim)],
                    /*allow_negative=*/false, /*index_error=*/false);
  if (index.type.numel() == 0) return self;
  bool scalar_self = self.rank() == 0;
  if (scalar_self) {
    self = b.reshape(self, {1});
    index = b.reshape(index, {index.type.numel()});
    if (!src_is_scalar) src = b.reshape(src, {src.type.numel()});
    dim = 0;
  }
  int64_t n = index.type.numel();
  Value coords = element_coords(b, index, dim);
  Value upd;
  if (src_is_scalar) {
    upd = b.broadcast_to(b.convert(src, self.dtype()), {n});
  } else {
    std::vector<int64_t> zero(static_cast<size_t>(index.rank()), 0),
        one(static_cast<size_t>(index.rank()), 1);
    Value s = b.slice(src, zero, index.shape(), one);
    upd = b.reshape(b.convert(s, self.dtype()), {n});
  }
  std::vector<int64_t> all = range(0, self.rank());
  Value base = self;
  Value hit;
  bool need_hits = (reduce != Reduce::kNone && !include_self) || reduce == Reduce::kMean;
  if (need_hits) {
    TensorType ct(ElementType::kS64, self.shape());
    Value counts =
        scatter(b, zeros(b, ct), coords,
                b.broadcast_to(b.constant_int(1, TensorType(ElementType::kS64, {})), {n}), {}, all,
                all, 1, add_op);
    hit = b.compare(counts, zeros(b, ct), CompareDirection::kGT);
    if (!include_self) base = b.select(hit, identity(b, reduce, self.type), self);
    Value r = scatter(b, base, coords, upd, {}, all, all, 1, combine_for(reduce));
    if (reduce == Reduce::kMean) {
      if (include_self) counts = b.add(counts, b.constant_int(1, ct));
      counts = b.select(hit, counts, b.constant_int(1, ct));
      r = b.select(hit, mean_of(b, r, b.convert(counts, self.dtype())), self);
    }
    return scalar_self ? b.reshape(r, {}) : r;
  }
  Value r = scatter(b, base, coords, upd, {}, all, all, 1, combine_for(reduce));
  return scalar_self ? b.reshape(r, {}) : r;
}

LoweringFn scatter_fn(bool scalar_src, bool has_reduce, Reduce fixed) {
  return [=](LoweringContext& ctx) -> std::vector<Value> {
    Value self = ctx.tensor(0);
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(self.rank(), 1));
    Reduce reduce = fixed;
    if (has_reduce) {
      reduce = parse_reduce(ctx, ctx.arg(4).ivalue.toStringRef());
    }
    bool include_self = true;
    if (ctx.num_args() > 5 && ctx.schema().arguments()[5].name() == "include_self") {
      include_self = ctx.bool_arg(5);
    }
    Value r =
        scatter_dim(ctx, self, dim, ctx.tensor(2), ctx.tensor(3), scalar_src, reduce, include_self);
    return {coerce(ctx.b, r, ctx.out_type())};
  };
}

// ---- index_add / index_copy / index_fill ----

// self with `source` slices combined in at `index` along `dim`: written (kNone), added (kSum,
// scaled by alpha when the op has one) or reduced (index_reduce's prod/mean/amax/amin, which
// start from the reduction's identity instead of self when include_self is false).
std::vector<Value> index_write(LoweringContext& ctx, Reduce reduce, bool include_self = true) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value self = ctx.tensor(0);
  Value index = ctx.tensor(2);
  Value source = b.convert(ctx.tensor(3), self.dtype());
  if (index.type.numel() == 0 || self.type.numel() == 0) return {coerce(b, self, out)};
  bool scalar_self = self.rank() == 0;
  if (scalar_self) self = b.reshape(self, {1});
  int64_t r = self.rank();
  int64_t dim = wrap_dim(ctx.int_arg(1), r);
  int64_t k = index.type.numel();
  if (source.rank() != r) {
    // 0-d source (with a 0-d or 1-d self): one slice.
    std::vector<int64_t> sshape = self.shape();
    sshape[static_cast<size_t>(dim)] = k;
    source = b.reshape(source, sshape);
  }
  if (reduce == Reduce::kSum && ctx.num_args() > 4) {
    size_t ai = ctx.index_of("alpha");
    Value alpha = ctx.operand(ai, self.dtype());
    source = b.mul(source, b.broadcast_to(alpha, source.shape()));
  }
  std::vector<int64_t> perm{dim};
  for (int64_t d = 0; d < r; ++d) {
    if (d != dim) perm.push_back(d);
  }
  Value st = b.transpose(source, perm);
  Value xt = b.transpose(self, perm);
  int64_t size = self.shape()[static_cast<size_t>(dim)];
  if (reduce == Reduce::kNone) {
    check_dim_indices(ctx, index, dim, size, /*allow_negative=*/false, /*index_error=*/true,
                      "index_copy_(): ");
  } else {
    check_indices(ctx, index, 0, size, "index out of range in self");
  }
  Value idx = b.reshape(wrap_index(b, index, size), {k, 1});
  Value res;
  if (reduce == Reduce::kNone || reduce == Reduce::kSum) {
    res = scatter(b, xt, idx, st, range(1, r), {0}, {0}, 1, combine_for(reduce));
  } else {
    // How many slices each position along dim receives.
    TensorType ct(ElementType::kS64, {size});
    Value ones = b.broadcast_to(b.constant_int(1, TensorType(ElementType::kS64, {})), {k});
    Value counts = scatter(b, zeros(b, ct), idx, ones, {}, {0}, {0}, 1, add_op);
    Value hit = b.compare(counts, zeros(b, ct), CompareDirection::kGT);
    Value hit_x = b.broadcast_in_dim(hit, xt.shape(), {0});
    Value base = include_self ? xt : b.select(hit_x, identity(b, reduce, xt.type), xt);
    res = scatter(b, base, idx, st, range(1, r), {0}, {0}, 1, combine_for(reduce));
    if (reduce == Reduce::kMean) {
      if (include_self) counts = b.add(counts, b.constant_int(1, ct));
      counts = b.select(hit, counts, b.constant_int(1, ct));
      Value c = b.broadcast_in_dim(b.convert(counts, xt.dtype()), xt.shape(), {0});
      res = b.select(hit_x, mean_of(b, res, c), xt);
    }
  }
  res = b.transpose(res, inverse(perm));
  if (scalar_self) res = b.reshape(res, {});
  return {coerce(b, res, out)};
}

// index_reduce(self, dim, index, source, reduce, include_self)
std::vector<Value> lower_index_reduce(LoweringContext& ctx) {
  Reduce reduce = parse_reduce(ctx, ctx.arg(4).ivalue.toStringRef());
  TORCH_CHECK(reduce != Reduce::kSum,
              "index_reduce(): Expected reduce to be one of prod, mean, "
              "amax or amin but got sum.");
  return index_write(ctx, reduce, ctx.bool_arg(5));
}

// masked_scatter(self, mask, source): the i-th selected position takes source's i-th element
// (row-major), found as the prefix count of the mask.
std::vector<Value> lower_masked_scatter(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value self = b.broadcast_to(ctx.tensor(0), out.shape);
  Value mask = b.broadcast_to(b.convert(ctx.tensor(1), ElementType::kPred), out.shape);
  Value source = ctx.tensor(2);
  int64_t n = out.numel(), m = source.type.numel();
  if (n == 0) return {coerce(b, self, out)};
  Value mf = b.reshape(mask, {n});
  Value count = prefix_sum(b, b.convert(mf, ElementType::kS64));
  // The last prefix count is the number of selected positions.
  Value selected = b.reshape(b.slice(count, {n - 1}, {n}, {1}), {});
  check(ctx, b.compare(selected, b.constant_int(m, selected.type), CompareDirection::kLE),
        "Number of elements of source < number of ones in mask", /*index_error=*/false);
  if (m == 0) return {coerce(b, self, out)};
  Value rank = b.sub(count, b.constant_int(1, TensorType(ElementType::kS64, {n})));
  rank = b.clamp(b.constant_int(0, TensorType(ElementType::kS64, {})), rank,
                 b.constant_int(m - 1, TensorType(ElementType::kS64, {})));
  Value src = b.reshape(b.convert(source, out.dtype), {m});
  Value picked =
      gather(b, src, b.reshape(rank, {n, 1}), {}, {0}, {0}, 1, {1}, TensorType(out.dtype, {n}));
  return {coerce(b, b.reshape(b.select(mf, picked, b.reshape(self, {n})), out.shape), out)};
}

// index_fill(self, dim, index, value): a select on "this position along dim is indexed".
std::vector<Value> lower_index_fill(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value self = ctx.tensor(0);
  Value index = ctx.tensor(2);
  if (index.type.numel() == 0 || self.type.numel() == 0) return {coerce(b, self, out)};
  int64_t r = std::max<int64_t>(self.rank(), 1);
  Value x = self.rank() == 0 ? b.reshape(self, {1}) : self;
  int64_t dim = wrap_dim(ctx.int_arg(1), r);
  int64_t size = x.shape()[static_cast<size_t>(dim)];
  int64_t k = index.type.numel();
  check_dim_indices(ctx, index, dim, size, /*allow_negative=*/true, /*index_error=*/true);
  Value idx = wrap_index(b, b.reshape(index, {k}), size);
  TensorType grid(ElementType::kS64, {size, k});
  Value pos = b.iota(grid, 0);
  Value eq = b.compare(pos, b.broadcast_in_dim(idx, {size, k}, {1}), CompareDirection::kEQ);
  Value hit =
      b.reduce_simple(eq, b.constant(0, TensorType(ElementType::kPred, {})), {1}, "stablehlo.or");
  Value mask = b.broadcast_in_dim(hit, x.shape(), {dim});
  Value v = b.broadcast_to(ctx.operand(3, x.dtype()), x.shape());
  return {coerce(b, b.reshape(b.select(mask, v, x), self.shape()), out)};
}

// ---- take / put ----

std::vector<Value> lower_take(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value self = ctx.tensor(0);
  Value index = ctx.tensor(1);
  int64_t n = self.type.numel();
  check_indices(
      ctx, index, -n, n,
      "out of range: tried to access index {} on a tensor of " + std::to_string(n) + " elements.");
  if (out.numel() == 0) return {zeros(b, out)};
  Value flat = b.reshape(self, {n});
  std::vector<int64_t> cshape = index.shape();
  cshape.push_back(1);
  Value idx = b.reshape(wrap_index(b, index, n), cshape);
  return {coerce(
      b, gather(b, flat, idx, {}, {0}, {0}, index.rank(), {1}, self.type.with_shape(index.shape())),
      out)};
}

// put(self, index, source, accumulate)
std::vector<Value> lower_put(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value self = ctx.tensor(0);
  Value index = ctx.tensor(1);
  int64_t n = self.type.numel(), k = index.type.numel();
  check_indices(
      ctx, index, -n, n,
      "out of range: tried to access index {} on a tensor of " + std::to_string(n) + " elements.");
  if (k == 0 || n == 0) return {coerce(b, self, out)};
  Value flat = b.reshape(self, {n});
  Value idx = b.reshape(wrap_index(b, index, n), {k, 1});
  Value src = b.reshape(b.convert(ctx.tensor(2), self.dtype()), {k});
  Value r = scatter(b, flat, idx, src, {}, {0}, {0}, 1,
                    ctx.bool_arg(3) ? Combine(add_op) : Combine(replace_op));
  return {coerce(b, b.reshape(r, self.shape()), out)};
}

TORCHTPU_LOWERING("aten::index.Tensor", lower_index, kComplex);
TORCHTPU_LOWERING("aten::_unsafe_index.Tensor", lower_index);
TORCHTPU_LOWERING("aten::index_put", lower_index_put, kComplex);
TORCHTPU_LOWERING("aten::_unsafe_index_put", lower_index_put);
TORCHTPU_LOWERING("aten::_index_put_impl", lower_index_put);
TORCHTPU_LOWERING("aten::scatter.src", scatter_fn(false, false, Reduce::kNone), kComplex);
TORCHTPU_LOWERING("aten::scatter.value", scatter_fn(true, false, Reduce::kNone), kComplex);
TORCHTPU_LOWERING("aten::scatter.reduce", scatter_fn(false, true, Reduce::kNone), kComplex);
TORCHTPU_LOWERING("aten::scatter.value_reduce", scatter_fn(true, true, Reduce::kNone), kComplex);
TORCHTPU_LOWERING("aten::scatter_add", scatter_fn(false, false, Reduce::kSum), kComplex);
TORCHTPU_LOWERING("aten::scatter_reduce.two", scatter_fn(false, true, Reduce::kNone));
TORCHTPU_LOWERING(
    "aten::index_add", [](LoweringContext& ctx) { return index_write(ctx, Reduce::kSum); },
    kComplex);
TORCHTPU_LOWERING(
    "aten::index_copy", [](LoweringContext& ctx) { return index_write(ctx, Reduce::kNone); },
    kComplex);
TORCHTPU_LOWERING("aten::index_reduce", lower_index_reduce);
TORCHTPU_LOWERING("aten::masked_scatter", lower_masked_scatter, kComplex);
TORCHTPU_LOWERING("aten::index_fill.int_Scalar", lower_index_fill, kComplex);
TORCHTPU_LOWERING("aten::index_fill.int_Tensor", lower_index_fill, kComplex);
TORCHTPU_LOWERING("aten::take", lower_take, kComplex);
TORCHTPU_LOWERING("aten::put", lower_put, kComplex);

}  // namespace
}  // namespace torchtpu::lowering
