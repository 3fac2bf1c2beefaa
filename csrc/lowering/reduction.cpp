// Reductions: sum/mean/prod, amax/amin/max/min (with indices), argmax/argmin, var/std, norms,
// any/all and logsumexp. Half-precision inputs accumulate in f32 like PyTorch's CPU kernels, and
// every result is reshaped to the meta kernel's shape, which covers keepdim for free.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// Sorted, de-duplicated, wrapped dims. A 0-d tensor accepts dim 0/-1 but has nothing to reduce.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, rank);
    if (w < rank) out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> all_dims(int64_t rank) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < rank; ++i) d.push_back(i);
  return d;
}

// `int[1]? dim` where None and [] both mean every dim (sum, mean, amax, var, norm...).
std::vector<int64_t> dims_or_all(const LoweringContext& ctx, size_t i, int64_t rank) {
  std::vector<int64_t> d = ctx.is_none(i) ? std::vector<int64_t>{} : ctx.int_list(i);
  if (d.empty()) return all_dims(rank);
  return normalize_dims(d, rank);
}

// Broadcasts a reduced value back over the dims it lost, for x - mean(x) style expressions.
Value broadcast_back(FunctionBuilder& b, Value reduced, const std::vector<int64_t>& full_shape,
                     const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < static_cast<int64_t>(full_shape.size()); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) kept.push_back(i);
  }
  return b.broadcast_in_dim(reduced, full_shape, kept);
}

// Reshape (restores keepdim's size-1 dims) and convert to the result type.
Value finish_reduced(LoweringContext& ctx, Value v, size_t i = 0) {
  const TensorType& out = ctx.out_type(i);
  return ctx.b.convert(ctx.b.reshape(v, out.shape), out.dtype);
}

// The smallest (lowest=true) or largest value of `t`: identity of max (resp. min).
Value extreme(FunctionBuilder& b, ElementType t, bool lowest) {
  TensorType s(t, {});
  switch (t) {
    case ElementType::kPred:
      return b.constant(lowest ? 0 : 1, s);
    case ElementType::kS8:
      return b.constant_int(lowest ? INT8_MIN : INT8_MAX, s);
    case ElementType::kS16:
      return b.constant_int(lowest ? INT16_MIN : INT16_MAX, s);
    case ElementType::kS32:
      return b.constant_int(lowest ? INT32_MIN : INT32_MAX, s);
    case ElementType::kS64:
      return b.constant_int(
          lowest ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(), s);
    case ElementType::kU8:
      return b.constant_int(lowest ? 0 : UINT8_MAX, s);
    case ElementType::kU16:
      return b.constant_int(lowest ? 0 : UINT16_MAX, s);
    case ElementType::kU32:
      return b.constant_int(lowest ? 0 : UINT32_MAX, s);
    case ElementType::kU64:
      return b.constant_int(lowest ? 0 : -1, s);  // prints as 2^64-1
    default:
      break;
  }
  return b.constant(
      lowest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity(),
      s);
}

// max/min reduction with an explicit NaN rule: XLA CPU's maximum/minimum return the non-NaN
// operand, while PyTorch's amax/amin (and max/min, norm inf) propagate NaN.
Value reduce_extreme(FunctionBuilder& b, Value x, Value init, const std::vector<int64_t>& dims,
                     bool is_max) {
  ElementType t = x.dtype();
  if (!shlo::is_float(t)) {
    const char* body = t == ElementType::kPred
                           ? (is_max ? "stablehlo.or" : "stablehlo.and")
                           : (is_max ? "stablehlo.maximum" : "stablehlo.minimum");
    return b.reduce_simple(x, init, dims, body);
  }
  return b.reduce({x}, {init}, dims,
                  [is_max](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
                    Value better = rb.compare(
                        a[0], a[1], is_max ? CompareDirection::kGT : CompareDirection::kLT);
                    Value a_nan = rb.compare(a[0], a[0], CompareDirection::kNE);
                    return {rb.select(rb.binary("stablehlo.or", better, a_nan), a[0], a[1])};
                  })[0];
}

Value reduce_extreme(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims, bool is_max) {
  return reduce_extreme(b, x, extreme(b, x.dtype(), is_max), dims, is_max);
}

Value reduce_sum(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims) {
  return b.reduce_simple(x, cst(b, 0, x.dtype()), dims, "stablehlo.add");
}

// ---- sum / mean / prod ----

std::vector<Value> sum_impl(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  ElementType acc = opmath_type(ctx.out_type().dtype);
  // Converting first also gives bool/int inputs their promoted int64 accumulator.
  Value x = ctx.b.convert(ctx.tensor(0), acc);
  return {finish_reduced(ctx, reduce_sum(ctx.b, x, dims))};
}

std::vector<Value> lower_sum(LoweringContext& ctx) {
  return sum_impl(ctx, all_dims(ctx.tensor(0).rank()));
}

std::vector<Value> lower_sum_dim(LoweringContext& ctx) {
  return sum_impl(ctx, dims_or_all(ctx, 1, ctx.tensor(0).rank()));
}

std::vector<Value> mean_impl(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  ElementType acc = opmath_type(ctx.out_type().dtype);
  Value x = ctx.b.convert(ctx.tensor(0), acc);
  Value s = reduce_sum(ctx.b, x, dims);
  // An empty reduction gives 0/0 = NaN, as on CPU.
  Value n = ctx.b.constant(static_cast<double>(reduced_count(x, dims)), s.type);
  return {finish_reduced(ctx, ctx.b.div(s, n))};
}

std::vector<Value> lower_mean(LoweringContext& ctx) {
  return mean_impl(ctx, all_dims(ctx.tensor(0).rank()));
}

std::vector<Value> lower_mean_dim(LoweringContext& ctx) {
  return mean_impl(ctx, dims_or_all(ctx, 1, ctx.tensor(0).rank()));
}

std::vector<Value> prod_impl(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  ElementType acc = opmath_type(ctx.out_type().dtype);
  Value x = ctx.b.convert(ctx.tensor(0), acc);
  Value r = ctx.b.reduce_simple(x, cst(ctx.b, 1, acc), dims, "stablehlo.multiply");
  return {finish_reduced(ctx, r)};
}

std::vector<Value> lower_prod(LoweringContext& ctx) {
  return prod_impl(ctx, all_dims(ctx.tensor(0).rank()));
}

std::vector<Value> lower_prod_dim(LoweringContext& ctx) {
  return prod_impl(ctx, normalize_dims({ctx.int_arg(1)}, ctx.tensor(0).rank()));
}

// ---- amax / amin / max / min ----

LoweringFn amax_like(bool is_max) {
  return [is_max](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    return {finish_reduced(ctx, reduce_extreme(ctx.b, x, dims_or_all(ctx, 1, x.rank()), is_max))};
  };
}

LoweringFn full_extreme(bool is_max) {
  return [is_max](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    // The meta kernel lets this through; CPU refuses it.
    TORCH_CHECK(x.type.numel() > 0, is_max ? "max" : "min",
                "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                "reduction dim with the 'dim' argument.");
    return {finish_reduced(ctx, reduce_extreme(ctx.b, x, all_dims(x.rank()), is_max))};
  };
}

// (value, index) reduction along one dim. The winner is the larger (smaller) value; the first
// NaN beats everything; ties go to the smaller index. This order is total, so the reduction
// is associative and commutative as stablehlo.reduce requires, and matches CPU's first-index
// rule whatever order XLA combines elements in.
std::vector<Value> reduce_with_index(FunctionBuilder& b, Value x, int64_t dim, bool is_max) {
  Value idx = b.iota(x.type.with_dtype(ElementType::kS64), dim);
  Value init_v = extreme(b, x.dtype(), is_max);
  Value init_i =
      b.constant_int(std::numeric_limits<int64_t>::max(), TensorType(ElementType::kS64, {}));
  const bool fp = shlo::is_float(x.dtype());
  return b.reduce(
      {x, idx}, {init_v, init_i}, {dim},
      [is_max, fp](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
        Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
        Value better = rb.compare(av, bv, is_max ? CompareDirection::kGT : CompareDirection::kLT);
        Value eq = rb.compare(av, bv, CompareDirection::kEQ);
        Value first = rb.compare(ai, bi, CompareDirection::kLT);
        Value pick_a = rb.binary("stablehlo.or", better, rb.binary("stablehlo.and", eq, first));
        if (fp) {
          Value a_nan = rb.compare(av, av, CompareDirection::kNE);
          Value b_not_nan = rb.compare(bv, bv, CompareDirection::kEQ);
          pick_a = rb.select(a_nan, rb.binary("stablehlo.or", b_not_nan, first),
                             rb.binary("stablehlo.and", b_not_nan, pick_a));
        }
        return {rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
      });
}

LoweringFn max_dim(bool is_max) {
  return [is_max](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
    TORCH_CHECK_INDEX(x.rank() == 0 || x.shape()[static_cast<size_t>(dim)] > 0,
                      is_max ? "max" : "min", "(): Expected reduction dim ", dim,
                      " to have non-zero size.");
    if (x.rank() == 0) {
      return {finish_reduced(ctx, x, 0), ctx.b.constant_int(0, ctx.out_type(1))};
    }
    std::vector<Value> r = reduce_with_index(ctx.b, x, dim, is_max);
    return {finish_reduced(ctx, r[0], 0), finish_reduced(ctx, r[1], 1)};
  };
}

LoweringFn argmax_like(bool is_max) {
  return [is_max](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    if (x.rank() == 0) return {ctx.b.constant_int(0, ctx.out_type())};
    int64_t dim = 0;
    if (ctx.is_none(1)) {
      x = ctx.b.reshape(x, {x.type.numel()});
    } else {
      dim = wrap_dim(ctx.int_arg(1), x.rank());
    }
    return {finish_reduced(ctx, reduce_with_index(ctx.b, x, dim, is_max)[1])};
  };
}

// ---- var / std ----

// Returns {var (or std), mean} in the accumulation type, reduced over `dims`. A complex input
// has a real variance, the mean of |x - mean|^2 (CPU adds the variances of the two parts,
// which is the same sum), and a complex mean.
std::pair<Value, Value> var_mean_impl(LoweringContext& ctx, bool take_sqrt) {
  FunctionBuilder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  std::vector<int64_t> dims = dims_or_all(ctx, 1, x0.rank());
  ElementType acc = opmath_type(ctx.out_type().dtype);
  const bool complex = shlo::is_complex(x0.dtype());
  Value x = b.convert(x0, complex ? shlo::complex_of(acc) : acc);
  TensorType s(acc, {});
  double n = static_cast<double>(reduced_count(x, dims));
  // Two-pass on shifted data (common.h's center), as accurate as the CPU's Welford when the
  // mean is large against the spread.
  Centered c = center(b, x, dims);
  Value mean = c.mean, diff = c.dev;
  Value sq = complex ? b.add(b.mul(ew::real_part(b, diff), ew::real_part(b, diff)),
                             b.mul(ew::imag_part(b, diff), ew::imag_part(b, diff)))
                     : b.mul(diff, diff);
  Value ss = reduce_sum(b, sq, dims);
  size_t ci = ctx.index_of("correction");
  Value correction = ctx.is_none(ci) ? b.constant(1, s) : b.convert(ctx.tensor(ci), acc);
  // WelfordOps divides by max(0, N - correction): var is inf (or NaN) when that is 0.
  Value divisor = b.max(b.sub(b.constant(n, s), correction), b.constant(0, s));
  Value var = b.div(ss, b.broadcast_to(divisor, ss.shape()));
  if (take_sqrt) var = b.unary("stablehlo.sqrt", var);
  return {var, mean};
}

LoweringFn var_like(bool take_sqrt) {
  return [take_sqrt](LoweringContext& ctx) -> std::vector<Value> {
    return {finish_reduced(ctx, var_mean_impl(ctx, take_sqrt).first)};
  };
}

LoweringFn var_mean_like(bool take_sqrt) {
  return [take_sqrt](LoweringContext& ctx) -> std::vector<Value> {
    auto [v, m] = var_mean_impl(ctx, take_sqrt);
    return {finish_reduced(ctx, v, 0), finish_reduced(ctx, m, 1)};
  };
}

// ---- norms ----

// ord arrives as a runtime Scalar, so every special case is computed and the right one is
// selected at run time; XLA fuses the reductions into one pass over the input.
Value vector_norm(LoweringContext& ctx, Value x0, std::optional<Value> ord,
                  const std::vector<int64_t>& dims) {
  FunctionBuilder& b = ctx.b;
  ElementType acc = opmath_type(ctx.out_type().dtype);
  // The norm of a complex vector is that of its magnitudes (a real result).
  Value a = shlo::is_complex(x0.dtype()) ? ew::complex_abs(b, b.convert(x0, shlo::complex_of(acc)))
                                         : b.unary("stablehlo.abs", b.convert(x0, acc));
  TensorType s(acc, {});
  Value p = ord ? b.convert(*ord, acc) : b.constant(2, s);
  const double inf = std::numeric_limits<double>::infinity();

  Value n_inf = reduce_extreme(b, a, b.constant(0, s), dims, /*is_max=*/true);
  Value n_ninf = reduce_extreme(b, a, b.constant(inf, s), dims, /*is_max=*/false);
  Value nonzero = b.convert(b.compare(a, b.constant(0, a.type), CompareDirection::kNE), acc);
  Value n_zero = reduce_sum(b, nonzero, dims);
  Value n_two = b.unary("stablehlo.sqrt", reduce_sum(b, b.mul(a, a), dims));
  const std::vector<int64_t>& rs = n_two.shape();
  Value p_full = b.broadcast_to(p, a.shape());
  Value p_red = b.broadcast_to(p, rs);
  Value n_p =
      b.binary("stablehlo.power", reduce_sum(b, b.binary("stablehlo.power", a, p_full), dims),
               b.div(b.constant(1, p_red.type), p_red));

  auto is = [&](double v) {
    return b.compare(p_red, b.constant(v, p_red.type), CompareDirection::kEQ);
  };
  Value r = b.select(is(2), n_two, n_p);
  r = b.select(is(0), n_zero, r);
  r = b.select(is(-inf), n_ninf, r);
  r = b.select(is(inf), n_inf, r);
  return r;
}

std::vector<Value> lower_linalg_vector_norm(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims = dims_or_all(ctx, 2, x.rank());
  return {finish_reduced(ctx, vector_norm(ctx, x, ctx.tensor(1), dims))};
}

// aten::norm overloads: p is `Scalar?` (None means 2) and dim is optional in some of them.
LoweringFn norm_like(bool has_dim) {
  return [has_dim](LoweringContext& ctx) -> std::vector<Value> {
    Value x = ctx.tensor(0);
    size_t pi = ctx.index_of("p");
    std::optional<Value> p;
    if (!ctx.is_none(pi)) p = ctx.tensor(pi);
    std::vector<int64_t> dims =
        has_dim ? dims_or_all(ctx, ctx.index_of("dim"), x.rank()) : all_dims(x.rank());
    return {finish_reduced(ctx, vector_norm(ctx, x, p, dims))};
  };
}

// ---- any / all ----

enum class DimForm { kAll, kInt, kOptList };

LoweringFn any_all(bool is_any, DimForm form) {
  return [is_any, form](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    Value x = ew::truth(b, ctx.tensor(0));
    std::vector<int64_t> dims;
    if (form == DimForm::kAll) {
      dims = all_dims(x.rank());
    } else if (form == DimForm::kInt) {
      dims = normalize_dims({ctx.int_arg(1)}, x.rank());
    } else if (ctx.is_none(1)) {
      dims = all_dims(x.rank());
    } else {
      // Unlike sum, any.dims/all.dims with dim=[] reduce nothing.
      dims = normalize_dims(ctx.int_list(1), x.rank());
    }
    Value r = reduce_extreme(b, x, dims, is_any);
    return {finish_reduced(ctx, r)};
  };
}

// ---- logsumexp ----

std::vector<Value> lower_logsumexp(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  std::vector<int64_t> dims = dims_or_all(ctx, 1, x0.rank());
  ElementType acc = opmath_type(ctx.out_type().dtype);
  Value x = b.convert(x0, acc);
  Value m = reduce_extreme(b, x, dims, /*is_max=*/true);
  // An infinite max is replaced by 0 (as CPU does) so that all -inf inputs give -inf, not NaN.
  Value inf = b.constant(std::numeric_limits<double>::infinity(), m.type);
  Value m_inf = b.compare(b.unary("stablehlo.abs", m), inf, CompareDirection::kEQ);
  m = b.select(m_inf, b.constant(0, m.type), m);
  Value e = b.unary("stablehlo.exponential", b.sub(x, broadcast_back(b, m, x.shape(), dims)));
  Value r = b.add(b.unary("stablehlo.log", reduce_sum(b, e, dims)), m);
  return {finish_reduced(ctx, r)};
}

// ---- cumsum / cumprod ----

using CombineFn = std::function<Value(FunctionBuilder&, Value, Value)>;

// Inclusive scan along `dim` as a reduce_window whose window reaches back over the whole dim.
LoweringFn scan(const char* body_op, double init, CombineFn combine = nullptr) {
  return [body_op, init, combine](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    ElementType acc = opmath_type(out.dtype);
    Value x = b.convert(ctx.tensor(0), acc);
    int64_t dim = wrap_dim(ctx.int_arg(1), x.rank());
    if (x.rank() == 0 || x.type.numel() == 0) return {finish_reduced(ctx, x)};
    int64_t n = x.shape()[static_cast<size_t>(dim)];
    Value init_v = cst(b, init, acc);
    Value r = shlo::reduce_window(
        b, {x}, {init_v}, scan_window(x.rank(), dim, n),
        [body_op, combine](FunctionBuilder& rb, const std::vector<Value>& a) -> std::vector<Value> {
          if (combine) return {combine(rb, a[0], a[1])};
          return {rb.binary(body_op, a[0], a[1])};
        })[0];
    return {finish_reduced(ctx, r)};
  };
}

// log(exp(a) + exp(b)) without overflow; two equal infinities give themselves.
Value logaddexp_combine(FunctionBuilder& b, Value x, Value y) {
  Value m = b.max(x, y);
  Value d = b.neg(b.unary("stablehlo.abs", b.sub(x, y)));
  Value r = b.add(m, b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", d)));
  Value same = b.compare(x, y, CompareDirection::kEQ);
  r = b.select(same, b.add(x, b.constant(std::log(2.0), x.type)), r);
  Value inf =
      b.compare(b.unary("stablehlo.abs", x), b.constant(INFINITY, x.type), CompareDirection::kEQ);
  r = b.select(b.binary("stablehlo.and", same, inf), x, r);
  Value nan = b.binary("stablehlo.or", b.compare(x, x, CompareDirection::kNE),
                       b.compare(y, y, CompareDirection::kNE));
  return b.select(nan, b.add(x, y), r);
}

// nansum: NaNs count as zero.
std::vector<Value> lower_nansum(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType acc = opmath_type(ctx.out_type().dtype);
  Value x = b.convert(ctx.tensor(0), acc);
  if (shlo::is_float(acc)) {
    x = b.select(b.compare(x, x, CompareDirection::kNE), b.constant(0, x.type), x);
  }
  return {finish_reduced(ctx, reduce_sum(b, x, dims_or_all(ctx, 1, x.rank())))};
}

// aminmax(self, *, dim=None, keepdim=False) -> (min, max)
std::vector<Value> lower_aminmax(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims = all_dims(x.rank());
  if (auto d = ctx.optional_int(1)) dims = normalize_dims({*d}, x.rank());
  return {finish_reduced(ctx, reduce_extreme(ctx.b, x, dims, false), 0),
          finish_reduced(ctx, reduce_extreme(ctx.b, x, dims, true), 1)};
}

// Sum of the main diagonal of a matrix.
std::vector<Value> lower_trace(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  ElementType acc = opmath_type(ctx.out_type().dtype);
  Value x = b.convert(ctx.tensor(0), acc);
  TORCH_CHECK(x.rank() == 2, "trace: expected a matrix");
  TensorType grid(ElementType::kS64, x.shape());
  Value diag = b.compare(b.iota(grid, 0), b.iota(grid, 1), CompareDirection::kEQ);
  x = b.select(diag, x, b.constant(0, x.type));
  return {finish_reduced(ctx, reduce_sum(b, x, {0, 1}))};
}

// histc(self, bins, min, max): as CPU's linear-interpolation histogram: min == max means the
// data's range (widened by 1 each way when that is a single value too); values outside the
// range (and NaN) are left out; pos = trunc((x - min) * bins / (max - min)), max in the last bin.
std::vector<Value> lower_histc(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  ElementType t = out.dtype;
  TORCH_CHECK(shlo::is_float(t) || shlo::is_integer(t),
              "torch.histc: input tensor must be floating point or integer, got ",
              ctx.tensor(0).type.str());
  int64_t bins = ctx.int_arg(1);
  // Integer inputs (accepted as on CUDA: Transformers' MoE routing counts expert ids with histc
  // on every accelerator) compute the bin in int64 with integer division, as CUDA's kernel does.
  const bool integral = shlo::is_integer(t);
  if (integral) t = ElementType::kS64;
  Value x = b.reshape(b.convert(ctx.tensor(0), t), {ctx.tensor(0).type.numel()});
  TensorType s(t, {});
  Value lo = coerce(b, ctx.tensor(2), s), hi = coerce(b, ctx.tensor(3), s);
  if (x.type.numel() > 0) {
    Value same = b.compare(lo, hi, CompareDirection::kEQ);
    lo = b.select(same, reduce_extreme(b, x, {0}, false), lo);
    hi = b.select(same, reduce_extreme(b, x, {0}, true), hi);
  }
  Value same = b.compare(lo, hi, CompareDirection::kEQ);
  Value one = b.constant(1, s);
  lo = b.select(same, b.sub(lo, one), lo);
  hi = b.select(same, b.add(hi, one), hi);
  const int64_t n = x.type.numel();
  Value lob = b.broadcast_in_dim(lo, {n}, {}), hib = b.broadcast_in_dim(hi, {n}, {});
  Value pos =
      b.div(b.mul(b.sub(x, lob), b.constant(static_cast<double>(bins), x.type)), b.sub(hib, lob));
  Value ipos = b.convert(pos, ElementType::kS64);  // integer division already truncated
  Value nb = b.constant_int(bins, ipos.type);
  ipos = b.select(b.compare(ipos, nb, CompareDirection::kEQ),
                  b.sub(ipos, b.constant_int(1, ipos.type)), ipos);
  Value valid = b.binary("stablehlo.and", b.compare(x, lob, CompareDirection::kGE),
                         b.compare(x, hib, CompareDirection::kLE));
  ipos = b.select(valid, ipos, b.constant_int(-1, ipos.type));
  TensorType grid(ElementType::kS64, {n, bins});
  Value hit =
      b.compare(b.broadcast_in_dim(ipos, {n, bins}, {0}), b.iota(grid, 1), CompareDirection::kEQ);
  Value counts = reduce_sum(b, b.convert(hit, t), {0});
  return {finish_reduced(ctx, integral ? b.convert(counts, out.dtype) : counts)};
}

// The CPU's logcumsumexp has no integral or bool form and raises; here the scan ran in float32
// and truncated into the input's integer dtype. Refused, the call takes the CPU fallback, which
// raises the CPU's own NotImplementedError at the call.
std::vector<Value> lower_logcumsumexp(LoweringContext& ctx) {
  const Value& x = ctx.tensor(0);
  TORCH_CHECK_NOT_IMPLEMENTED(shlo::is_float(x.dtype()), "logcumsumexp of ", x.type.str(),
                              " (the CPU has none)");
  static const LoweringFn scan_fn = scan("", -INFINITY, logaddexp_combine);
  return scan_fn(ctx);
}

// cummax/cummin(self, dim) -> (values, indices) as one variadic reduce_window: NaN wins,
// otherwise the extreme value; ties (NaNs included) go to the later index, as in ATen's loop.
LoweringFn cum_extreme(bool is_max) {
  return [is_max](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    Value x = ctx.tensor(0);
    // The CPU's (and CUDA's) kernel has no uint16/32/64 form and raises; computing them here
    // made code that runs on tpu fail on either. Refused, the call takes the CPU fallback, which
    // raises the CPU's own NotImplementedError at the call (and a compiled graph declines to the
    // same eager call). float8 stays computed, like the rest of the float8 family the CPU lacks
    // (max/min/cumsum/pools, 94b2dfb; test_float8.py).
    const ElementType t = x.dtype();
    TORCH_CHECK_NOT_IMPLEMENTED(
        t != ElementType::kU16 && t != ElementType::kU32 && t != ElementType::kU64,
        is_max ? "cummax" : "cummin", " of ", x.type.str(), " (the CPU has none)");
    int64_t dim = wrap_dim(ctx.int_arg(1), std::max<int64_t>(x.rank(), 1));
    if (x.rank() == 0 || x.type.numel() == 0) {
      return {finish_reduced(ctx, x, 0),
              finish_reduced(ctx, b.constant_int(0, x.type.with_dtype(ElementType::kS64)), 1)};
    }
    // float8 scans in f32 (exact; values and order unchanged): XLA's float8 normalization
    // breaks on this variadic reduce_window (a compile-time RET_CHECK).
    if (shlo::is_float8(x.dtype())) x = b.convert(x, ElementType::kF32);
    int64_t n = x.shape()[static_cast<size_t>(dim)];
    Value idx = b.iota(x.type.with_dtype(ElementType::kS64), dim);
    TensorType is(ElementType::kS64, {});
    Value init_v = extreme(b, x.dtype(), is_max);
    Value init_i = b.constant_int(-1, is);
    bool fp = shlo::is_float(x.dtype());
    auto body = [is_max, fp](FunctionBuilder& rb,
                             const std::vector<Value>& a) -> std::vector<Value> {
      Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
      Value a_better = rb.compare(av, bv, is_max ? CompareDirection::kGT : CompareDirection::kLT);
      Value tie = rb.compare(av, bv, CompareDirection::kEQ);
      Value later = rb.compare(ai, bi, CompareDirection::kGT);
      Value pick_a = rb.binary("stablehlo.or", a_better, rb.binary("stablehlo.and", tie, later));
      if (fp) {
        Value an = rb.compare(av, av, CompareDirection::kNE);
        Value bn = rb.compare(bv, bv, CompareDirection::kNE);
        Value both = rb.binary("stablehlo.and", an, bn);
        pick_a = rb.select(both, later,
                           rb.select(an, an, rb.select(bn, rb.unary("stablehlo.not", bn), pick_a)));
      }
      return {rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
    };
    std::vector<Value> r =
        shlo::reduce_window(b, {x, idx}, {init_v, init_i}, scan_window(x.rank(), dim, n), body);
    return {finish_reduced(ctx, r[0], 0), finish_reduced(ctx, r[1], 1)};
  };
}

// hash_tensor(self, dim, keepdim, mode=0): elements widened to f64 / i64, bitcast to u64 and
// xor-reduced.
std::vector<Value> lower_hash_tensor(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  TORCH_CHECK(ctx.int_arg(ctx.index_of("mode")) == 0, "hash_tensor: only mode=0 is supported");
  Value x = ctx.tensor(0);
  Value wide =
      shlo::is_float(x.dtype()) ? b.convert(x, ElementType::kF64) : b.convert(x, ElementType::kS64);
  Value bits = b.bitcast_convert(wide, ElementType::kU64);
  std::vector<int64_t> dims = dims_or_all(ctx, 1, x.rank());
  Value r = b.reduce_simple(bits, b.constant_int(0, TensorType(ElementType::kU64, {})), dims,
                            "stablehlo.xor");
  return {finish_reduced(ctx, r)};
}

TORCHTPU_LOWERING("aten::sum", lower_sum, kComplex);
TORCHTPU_LOWERING("aten::sum.dim_IntList", lower_sum_dim, kComplex);
TORCHTPU_LOWERING("aten::mean", lower_mean, kComplex);
TORCHTPU_LOWERING("aten::mean.dim", lower_mean_dim, kComplex);
TORCHTPU_LOWERING("aten::prod", lower_prod, kComplex);
TORCHTPU_LOWERING("aten::prod.dim_int", lower_prod_dim, kComplex);
TORCHTPU_LOWERING("aten::amax", amax_like(true));
TORCHTPU_LOWERING("aten::amin", amax_like(false));
TORCHTPU_LOWERING("aten::max", full_extreme(true));
TORCHTPU_LOWERING("aten::min", full_extreme(false));
TORCHTPU_LOWERING("aten::max.dim", max_dim(true));
TORCHTPU_LOWERING("aten::min.dim", max_dim(false));
TORCHTPU_LOWERING("aten::argmax", argmax_like(true));
TORCHTPU_LOWERING("aten::argmin", argmax_like(false));
TORCHTPU_LOWERING("aten::var.correction", var_like(false), kComplex);
TORCHTPU_LOWERING("aten::std.correction", var_like(true), kComplex);
TORCHTPU_LOWERING("aten::var_mean.correction", var_mean_like(false), kComplex);
TORCHTPU_LOWERING("aten::std_mean.correction", var_mean_like(true), kComplex);
TORCHTPU_LOWERING("aten::linalg_vector_norm", lower_linalg_vector_norm, kComplex);
TORCHTPU_LOWERING("aten::norm.Scalar", norm_like(false), kComplex);
TORCHTPU_LOWERING("aten::norm.ScalarOpt_dtype", norm_like(false), kComplex);
TORCHTPU_LOWERING("aten::norm.ScalarOpt_dim", norm_like(true), kComplex);
TORCHTPU_LOWERING("aten::norm.ScalarOpt_dim_dtype", norm_like(true), kComplex);
TORCHTPU_LOWERING("aten::any", any_all(true, DimForm::kAll), kComplex);
TORCHTPU_LOWERING("aten::any.dim", any_all(true, DimForm::kInt), kComplex);
TORCHTPU_LOWERING("aten::any.dims", any_all(true, DimForm::kOptList), kComplex);
TORCHTPU_LOWERING("aten::all", any_all(false, DimForm::kAll), kComplex);
TORCHTPU_LOWERING("aten::all.dim", any_all(false, DimForm::kInt), kComplex);
TORCHTPU_LOWERING("aten::all.dims", any_all(false, DimForm::kOptList), kComplex);
TORCHTPU_LOWERING("aten::logsumexp", lower_logsumexp);
TORCHTPU_LOWERING("aten::cumsum", scan("stablehlo.add", 0), kComplex);
TORCHTPU_LOWERING("aten::_logcumsumexp", lower_logcumsumexp);
TORCHTPU_LOWERING("aten::nansum", lower_nansum);
TORCHTPU_LOWERING("aten::aminmax", lower_aminmax);
TORCHTPU_LOWERING("aten::trace", lower_trace, kComplex);
TORCHTPU_LOWERING("aten::histc", lower_histc);
TORCHTPU_LOWERING("aten::hash_tensor", lower_hash_tensor);
TORCHTPU_LOWERING("aten::cummax", cum_extreme(true));
TORCHTPU_LOWERING("aten::cummin", cum_extreme(false));
TORCHTPU_LOWERING("aten::cumprod", scan("stablehlo.multiply", 1), kComplex);

}  // namespace
}  // namespace torchtpu::lowering
