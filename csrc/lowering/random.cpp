// Random sampling on stablehlo.rng_bit_generator (ThreeFry). The Generator argument is a
// runtime (seed, offset) pair, so reseeding never recompiles. The bits are mapped to values the
// way PyTorch's CPU transformations do (uniform from `digits` mantissa bits, Box-Muller normals,
// modulo for integer ranges); the streams differ from CPU's, the distributions do not.
#include <ATen/core/function_schema.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>

#include "lowering/checks.h"
#include "lowering/lowering.h"
#include "lowering/numbers.h"
#include "lowering/random_bits.h"
#include "lowering/scalar_fits.h"
#include "lowering/sorting.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;
using Values = std::vector<Value>;

// The op's Generator argument: its (seed, offset) state as a runtime value. Factory forms
// without one (aten::rand, aten::randn_like... in compiled graphs) draw a fresh stream of the
// default generator.
Value generator_state(LoweringContext& ctx) {
  if (!ctx.schema().argumentIndexWithName("generator")) return ctx.rng_state();
  const LArg& g = ctx.arg(ctx.index_of("generator"));
  TORCH_CHECK(g.kind == LArg::Kind::kGenerator, "torchtpu lowering: ", ctx.schema().name(),
              ": the generator state did not arrive as a runtime value");
  return g.value;
}

// `shape` random bits of `bits` type (ui32 or ui64) drawn from the op's generator.
Value random_bits(LoweringContext& ctx, const std::vector<int64_t>& shape, ElementType bits) {
  return random_bits_from_state(ctx.b, generator_state(ctx), shape, bits);
}

int digits(ElementType t) {
  switch (t) {
    case ElementType::kF64:
      return 53;
    case ElementType::kF16:
      return 11;
    case ElementType::kBF16:
      return 8;
    default:
      return 24;
  }
}

// f64 for f64 results, else f32 (half types sample in f32, then round).
ElementType sample_type(ElementType out) {
  return out == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
}

// Uniform [0, 1) in `ct` from the low `digits` bits, as at::uniform_real_distribution does, so
// that the value is exact in the result dtype and never rounds up to 1.
Value uniform01(LoweringContext& ctx, const std::vector<int64_t>& shape, ElementType ct, int d) {
  return uniform01_from_state(ctx.b, generator_state(ctx), shape, ct, d);
}

Value uniform01_for(LoweringContext& ctx, const TensorType& out) {
  ElementType ct = sample_type(out.dtype);
  return uniform01(ctx, out.shape, ct, shlo::is_float(out.dtype) ? digits(out.dtype) : digits(ct));
}

// rng_bit_generator over zero elements is pointless (and not every backend accepts it): an
// empty result is this zero-element constant instead.
Value empty_value(LoweringContext& ctx) {
  const TensorType& out = ctx.out_type();
  return ctx.b.broadcast_to(ctx.b.constant(0, TensorType(out.dtype, {})), out.shape);
}

// A random op's one result: `draw(b, out)` where the result has elements, else empty_value.
template <typename Draw>
std::vector<Value> unless_empty(LoweringContext& ctx, Draw draw) {
  if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
  return {draw(ctx.b, ctx.out_type())};
}

// A compiled graph's literal (kConst): checked here, once per program. Eager calls pass these
// numbers at run time and aten/argument_checks.cpp checks them on every call.
bool is_literal(const LoweringContext& ctx, size_t i) {
  return ctx.arg(i).kind == LArg::Kind::kConst;
}

std::vector<Value> lower_uniform(LoweringContext& ctx) {
  if (is_literal(ctx, 1) && is_literal(ctx, 2)) {
    TORCH_CHECK(ctx.double_arg(1) <= ctx.double_arg(2),
                "uniform_ expects to return a [from, to) range, but found from=", ctx.double_arg(1),
                " > to=", ctx.double_arg(2));
  }
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    Value u = uniform01_for(ctx, out);
    // from/to are runtime values in eager mode: new bounds never recompile.
    Value from = b.broadcast_to(number(ctx, 1, u.dtype()), u.shape());
    Value to = b.broadcast_to(number(ctx, 2, u.dtype()), u.shape());
    Value v = b.add(b.mul(u, b.sub(to, from)), from);
    return b.convert(v, out.dtype);
  });
}

// Standard normal samples by Box-Muller: sqrt(-2 ln(1 - u1)) * cos(2 pi u2).
Value standard_normal(LoweringContext& ctx, const TensorType& out) {
  FunctionBuilder& b = ctx.b;
  ElementType ct = sample_type(out.dtype);
  int64_t n = out.numel();
  Value u = uniform01(ctx, {2, n}, ct, digits(ct));
  TensorType row(ct, {n});
  Value u1 = b.reshape(b.slice(u, {0, 0}, {1, n}, {1, 1}), {n});
  Value u2 = b.reshape(b.slice(u, {1, 0}, {2, n}, {1, 1}), {n});
  Value one_minus = b.sub(b.constant(1, row), u1);  // in (0, 1], so the log is finite
  Value radius =
      b.unary("stablehlo.sqrt", b.mul(b.constant(-2, row), b.unary("stablehlo.log", one_minus)));
  Value theta = b.mul(b.constant(2 * M_PI, row), u2);
  Value z = b.mul(radius, b.unary("stablehlo.cosine", theta));
  return b.reshape(z, out.shape);
}

// mean/std/p/...: a tensor, a runtime number (eager) or a graph literal, by argument name.
Value param(LoweringContext& ctx, const char* name, const TensorType& t) {
  size_t i = ctx.index_of(name);
  if (ctx.arg(i).kind == LArg::Kind::kTensor) return coerce(ctx.b, ctx.tensor(i), t);
  return ctx.b.broadcast_to(number(ctx, i, t.dtype), t.shape);
}

std::vector<Value> lower_normal(LoweringContext& ctx) {
  size_t si = ctx.index_of("std");
  if (ctx.arg(si).kind == LArg::Kind::kTensor) {
    // A std tensor is data: a device-side check.
    Value std = ctx.tensor(si);
    if (std.type.numel() > 0) {
      Value ok = ctx.b.compare(std, zeros(ctx.b, std.type), CompareDirection::kGE);
      Value all = ctx.b.reduce_simple(ctx.b.reshape(ok, {std.type.numel()}),
                                      ctx.b.constant(1, TensorType(ElementType::kPred, {})), {0},
                                      "stablehlo.and");
      check(ctx, all, "normal expects all elements of std >= 0.0", /*index_error=*/false);
    }
  } else if (is_literal(ctx, si)) {
    TORCH_CHECK(ctx.double_arg(si) >= 0.0, "normal expects std >= 0.0, but found std ",
                ctx.double_arg(si));
  }
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    Value z = standard_normal(ctx, out);
    Value mean = param(ctx, "mean", z.type);
    Value std = param(ctx, "std", z.type);
    return b.convert(b.add(mean, b.mul(std, z)), out.dtype);
  });
}

// Bernoulli draws: 1 where u < p. `p` is the float argument, a tensor argument, or self.
LoweringFn bernoulli(const char* p_name) {
  return [p_name](LoweringContext& ctx) -> std::vector<Value> {
    size_t pi = p_name ? ctx.index_of(p_name) : 0;
    if (ctx.arg(pi).kind == LArg::Kind::kTensor) {
      Value p = ctx.tensor(pi);
      if (p.type.numel() > 0) {
        FunctionBuilder& b = ctx.b;
        Value flat = b.reshape(p, {p.type.numel()});
        Value in =
            b.binary("stablehlo.and", b.compare(flat, zeros(b, flat.type), CompareDirection::kGE),
                     b.compare(flat, b.constant(1, flat.type), CompareDirection::kLE));
        Value all = b.reduce_simple(in, b.constant(1, TensorType(ElementType::kPred, {})), {0},
                                    "stablehlo.and");
        check(ctx, all,
              "Expected p_in >= 0 && p_in <= 1 to be true, but got false. (bernoulli: every "
              "probability must be in [0, 1])",
              /*index_error=*/false);
      }
    } else if (is_literal(ctx, pi)) {
      double p = ctx.double_arg(pi);
      TORCH_CHECK(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
    }
    if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    ElementType ct = sample_type(out.dtype);
    Value u = uniform01(ctx, out.shape, ct, digits(ct));
    Value p = p_name ? param(ctx, p_name, u.type) : coerce(b, ctx.tensor(0), u.type);
    return {b.convert(b.compare(u, p, CompareDirection::kLT), out.dtype)};
  };
}

std::vector<Value> lower_exponential(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    Value u = uniform01_for(ctx, out);
    // -log(1 - u) / lambda: u < 1, so the sample is finite.
    Value e = b.neg(b.unary("stablehlo.log_plus_one", b.neg(u)));
    Value v = b.div(e, param(ctx, "lambd", u.type));
    return b.convert(v, out.dtype);
  });
}

std::vector<Value> lower_log_normal(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    Value z = standard_normal(ctx, out);
    Value v = b.add(param(ctx, "mean", z.type), b.mul(param(ctx, "std", z.type), z));
    return b.convert(b.unary("stablehlo.exponential", v), out.dtype);
  });
}

// median + sigma * tan(pi * (u - 1/2)), with tan spelled as sin/cos.
std::vector<Value> lower_cauchy(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    Value u = uniform01_for(ctx, out);
    Value angle = b.mul(b.constant(M_PI, u.type), b.sub(u, b.constant(0.5, u.type)));
    Value tan = b.div(b.unary("stablehlo.sine", angle), b.unary("stablehlo.cosine", angle));
    Value v = b.add(param(ctx, "median", u.type), b.mul(param(ctx, "sigma", u.type), tan));
    return b.convert(v, out.dtype);
  });
}

// Number of trials to the first success: ceil(log(u) / log(1 - p)) with u in (0, 1].
std::vector<Value> lower_geometric(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    ElementType ct = sample_type(out.dtype);
    Value u = uniform01(ctx, out.shape, ct, digits(ct));
    Value one = b.constant(1, u.type);
    Value l = b.unary("stablehlo.log", b.sub(one, u));
    Value p = param(ctx, "p", u.type);
    Value k = b.unary("stablehlo.ceil", b.div(l, b.unary("stablehlo.log_plus_one", b.neg(p))));
    return b.convert(b.max(k, one), out.dtype);
  });
}

// ---- random_ (integers) ----

// The largest value random_ may produce when no upper bound is given.
int64_t max_inclusive(ElementType t) {
  switch (t) {
    case ElementType::kPred:
      return 1;
    case ElementType::kS8:
      return INT8_MAX;
    case ElementType::kS16:
      return INT16_MAX;
    case ElementType::kS32:
      return INT32_MAX;
    case ElementType::kS64:
      return std::numeric_limits<int64_t>::max();
    case ElementType::kU8:
      return UINT8_MAX;
    case ElementType::kU16:
      return UINT16_MAX;
    case ElementType::kU32:
      return UINT32_MAX;
    case ElementType::kU64:
      return std::numeric_limits<int64_t>::max();
    default:
      return int64_t{1} << digits(t);  // every integer up to 2^digits is exact
  }
}

// Integers from + (bits mod range), range == 0 meaning all 2^64 values. Like CPU, 32 random
// bits are used when the range fits in them.
Value random_ints(LoweringContext& ctx, int64_t from, uint64_t range) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  if (range == 0) {
    Value bits = random_bits(ctx, out.shape, ElementType::kU64);
    return b.convert(b.bitcast_convert(bits, ElementType::kS64), out.dtype);
  }
  bool wide = range > (uint64_t{1} << 32);
  Value bits = random_bits(ctx, out.shape, wide ? ElementType::kU64 : ElementType::kU32);
  TensorType u64(ElementType::kU64, out.shape);
  Value r = b.binary("stablehlo.remainder", b.convert(bits, ElementType::kU64),
                     b.constant_int(static_cast<int64_t>(range), u64));
  Value v = b.add(b.convert(r, ElementType::kS64),
                  b.constant_int(from, TensorType(ElementType::kS64, out.shape)));
  return b.convert(v, out.dtype);
}

std::vector<Value> random_from_to(LoweringContext& ctx, int64_t from, std::optional<int64_t> to) {
  if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
  uint64_t range;
  if (to) {
    TORCH_CHECK(from < *to,
                "torchtpu lowering: random_ expects 'from' to be less than 'to', got from=", from,
                " >= to=", *to);
    range = static_cast<uint64_t>(*to) - static_cast<uint64_t>(from);
  } else {
    // Unsigned wrap-around makes [INT64_MIN, INT64_MAX] come out as 0, i.e. the full range.
    range = static_cast<uint64_t>(max_inclusive(ctx.out_type().dtype)) -
            static_cast<uint64_t>(from) + 1;
  }
  return {random_ints(ctx, from, range)};
}

// random_(from, to) with runtime bounds (eager mode; aten/argument_checks.cpp checks
// from < to on the host): from + (64 random bits mod (to - from)), the range computed in u64
// on the device, where 0 means all 2^64 values. `to` absent: up to the dtype's largest value.
std::vector<Value> random_runtime_bounds(LoweringContext& ctx, size_t from_i,
                                         std::optional<size_t> to_i) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    TensorType u64_0(ElementType::kU64, {});
    Value from = number(ctx, from_i, ElementType::kS64);
    Value hi =
        to_i ? b.bitcast_convert(number(ctx, *to_i, ElementType::kS64), ElementType::kU64)
             : b.add(b.constant_int(max_inclusive(out.dtype), u64_0), b.constant_int(1, u64_0));
    Value range = b.sub(hi, b.bitcast_convert(from, ElementType::kU64));
    Value bits = random_bits(ctx, out.shape, ElementType::kU64);
    Value ranges = b.broadcast_to(range, out.shape);
    Value zero = b.constant_int(0, TensorType(ElementType::kU64, out.shape));
    Value is_full = b.compare(ranges, zero, CompareDirection::kEQ);
    // Never divide by 0: the full range takes the bits as they are.
    Value safe = b.select(is_full, b.constant_int(1, ranges.type), ranges);
    Value offset = b.select(is_full, bits, b.binary("stablehlo.remainder", bits, safe));
    Value v = b.add(b.bitcast_convert(offset, ElementType::kS64), b.broadcast_to(from, out.shape));
    return b.convert(v, out.dtype);
  });
}

std::vector<Value> lower_random_from(LoweringContext& ctx) {
  if (ctx.arg(1).kind == LArg::Kind::kScalar) {
    return random_runtime_bounds(ctx, 1, ctx.is_none(2) ? std::nullopt : std::optional<size_t>(2));
  }
  return random_from_to(ctx, ctx.int_arg(1), ctx.optional_int(2));
}

std::vector<Value> lower_random_to(LoweringContext& ctx) {
  if (ctx.arg(1).kind == LArg::Kind::kScalar) {
    // from = 0: a literal zero in the `from` position of the runtime form.
    FunctionBuilder& b = ctx.b;
    if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
    const TensorType& out = ctx.out_type();
    Value range = b.bitcast_convert(number(ctx, 1, ElementType::kS64), ElementType::kU64);
    Value bits = random_bits(ctx, out.shape, ElementType::kU64);
    Value ranges = b.broadcast_to(range, out.shape);
    Value v = b.binary("stablehlo.remainder", bits, ranges);
    return {b.convert(b.bitcast_convert(v, ElementType::kS64), out.dtype)};
  }
  return random_from_to(ctx, 0, ctx.int_arg(1));
}

std::vector<Value> lower_random(LoweringContext& ctx) {
  return random_from_to(ctx, 0, std::nullopt);
}

// ---- random factories (compiled graphs only: eager factories fill an empty tensor in place) ----

std::vector<Value> lower_rand(LoweringContext& ctx) {
  if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
  return {ctx.b.convert(uniform01_for(ctx, ctx.out_type()), ctx.out_type().dtype)};
}

std::vector<Value> lower_randn(LoweringContext& ctx) {
  if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
  return {ctx.b.convert(standard_normal(ctx, ctx.out_type()), ctx.out_type().dtype)};
}

// randint(high, size) / randint.low(low, high, size) / randint_like(self, high) /
// randint_like.low_dtype(self, low, high): integers in [low, high), checked as the CPU does.
std::vector<Value> lower_randint(LoweringContext& ctx) {
  int64_t high = ctx.int_arg(ctx.index_of("high"));
  int64_t low = ctx.schema().argumentIndexWithName("low") ? ctx.int_arg(ctx.index_of("low")) : 0;
  TORCH_CHECK(low < high, "random_ expects 'from' to be less than 'to', but got from=", low,
              " >= to=", high);
  return random_from_to(ctx, low, high);
}

// A uniformly random permutation: iota ordered by 64 random bits per element (a tie, at odds of
// about n^2 / 2^65, only keeps the two elements in order).
std::vector<Value> lower_randperm(LoweringContext& ctx) {
  const TensorType& out = ctx.out_type();
  // The CPU's checks on n against the result dtype (n is structural: one check per program).
  const int64_t n = out.shape.at(0);
  TORCH_CHECK(out.dtype != ElementType::kPred, "\"randperm\" not implemented for 'Bool'");
  if (out.dtype == ElementType::kF16) {
    TORCH_CHECK(n <= 2049, "n cannot be greater than 2049 for Half type.");
  } else if (out.dtype == ElementType::kF32) {
    TORCH_CHECK(n <= (int64_t{1} << 24) + 1, "n cannot be greater than 2^24+1 for Float type.");
  } else if (out.dtype == ElementType::kF64) {
    TORCH_CHECK(n <= (int64_t{1} << 53) + 1, "n cannot be greater than 2^53+1 for Double type.");
  } else if (!shlo::is_float(out.dtype)) {  // bfloat16 goes unchecked, as on the CPU
    check_scalar_fits(c10::Scalar(n > 0 ? n - 1 : n), to_scalar_type(out.dtype));
  }
  if (ctx.out_type().numel() == 0) return {empty_value(ctx)};
  Value bits = random_bits(ctx, out.shape, ElementType::kU64);
  Value keys = ctx.b.bitcast_convert(bits, ElementType::kS64);
  Value perm = sort_with_indices(ctx.b, keys, 0, /*descending=*/false).at(1);
  return {ctx.b.convert(perm, out.dtype)};
}

// Uniforms in [0, 1) from `bits` (ui32 or ui64) keeping the low `d` bits, as uniform01 does.
Value uniform_from_bits(FunctionBuilder& b, Value bits, ElementType ct, int d) {
  uint64_t mask = (uint64_t{1} << d) - 1;
  Value masked =
      b.binary("stablehlo.and", bits, b.constant_int(static_cast<int64_t>(mask), bits.type));
  return b.mul(b.convert(masked, ct), b.constant(std::ldexp(1.0, -d), bits.type.with_dtype(ct)));
}

// A fresh (key, counter) from the op's (seed, offset), as random_bits_from_state does: the
// samplers below draw from it directly, round after round.
Value sampler_state(LoweringContext& ctx) {
  Value state = generator_state(ctx);
  return shlo::rng_bit_generator(ctx.b, state, state.type).second;
}

// What one round of a rejection sampler (gamma, poisson, binomial) says for each element:
// whether this round finishes it, the value it finishes with, and the element's evolving state
// for the next round.
struct SamplerRound {
  Value finished;
  Value value;
  Values vars;
};
// One round: `u` holds this round's uniforms (one [n] row per draw), `vars` the evolving state,
// `fixed` what every round reads unchanged.
using SamplerBody = std::function<SamplerRound(FunctionBuilder& lb, const Values& u,
                                               const Values& vars, const Values& fixed)>;

// The loop the rejection samplers share, as the CPU's per-element loops but for all n elements
// at once: one stablehlo.while whose rounds draw `draws` uniforms in `ct` per element from the
// ThreeFry `state` it carries (so rounds never reuse bits, and no other op's stream is touched).
// An element takes the value of the first round that finishes it; elements `decided` on entry
// never enter. The loop ends when every element is decided or after `max_rounds` rounds; an
// element still undecided then comes out NaN. `fixed` rides in the loop state because the
// regions only see what the loop carries.
Value run_sampler(FunctionBuilder& b, Value state, Value decided, ElementType ct, int64_t draws,
                  int64_t max_rounds, const Values& vars, const Values& fixed,
                  const SamplerBody& round) {
  const int64_t n = decided.type.numel();
  const int d_bits = digits(ct);
  const ElementType bt = d_bits > 32 ? ElementType::kU64 : ElementType::kU32;
  const TensorType i64(ElementType::kS64, {});
  const size_t n_vars = vars.size();
  // The loop state: (rng state, done, result, round count, vars..., fixed...).
  Values init{state, decided, b.constant(NAN, TensorType(ct, {n})), b.constant_int(0, i64)};
  init.insert(init.end(), vars.begin(), vars.end());
  init.insert(init.end(), fixed.begin(), fixed.end());
  auto cond = [&](FunctionBuilder& lb, const Values& st) -> Values {
    Value pending =
        lb.reduce_simple(lb.unary("stablehlo.not", st[1]),
                         lb.constant(0, TensorType(ElementType::kPred, {})), {0}, "stablehlo.or");
    Value more = lb.compare(st[3], lb.constant_int(max_rounds, i64), CompareDirection::kLT);
    return {lb.binary("stablehlo.and", pending, more)};
  };
  auto body = [&](FunctionBuilder& lb, const Values& st) -> Values {
    auto [next, bits] = shlo::rng_bit_generator(lb, st[0], TensorType(bt, {draws, n}));
    Value all = uniform_from_bits(lb, bits, ct, d_bits);
    Values u;
    for (int64_t i = 0; i < draws; ++i) {
      u.push_back(lb.reshape(lb.slice(all, {i, 0}, {i + 1, n}, {1, 1}), {n}));
    }
    const auto var_begin = st.begin() + 4;
    const auto fixed_begin = var_begin + static_cast<std::ptrdiff_t>(n_vars);
    SamplerRound r = round(lb, u, Values(var_begin, fixed_begin), Values(fixed_begin, st.end()));
    TORCH_CHECK(r.vars.size() == n_vars, "torchtpu lowering: a sampler round returned ",
                r.vars.size(), " values for ", n_vars, " evolving ones");
    Value take = lb.binary("stablehlo.and", r.finished, lb.unary("stablehlo.not", st[1]));
    Values out{next, lb.binary("stablehlo.or", st[1], take), lb.select(take, r.value, st[2]),
               lb.add(st[3], lb.constant_int(1, i64))};
    out.insert(out.end(), r.vars.begin(), r.vars.end());
    out.insert(out.end(), fixed_begin, st.end());
    return out;
  };
  return b.while_loop(init, cond, body).at(2);
}

// _standard_gamma(self, generator): Gamma(alpha, 1) samples by the CPU's algorithm
// (at::native sample_gamma): alpha < 1 is boosted to alpha + 1 with a U^(1/alpha) factor, then
// Marsaglia-Tsang acceptance-rejection; each element loops until it accepts (run_sampler). The
// result is at least the dtype's smallest normal, as on the CPU. An element that has not
// accepted after 256 rounds (an acceptance rate above 95% makes that about 1e-300 for valid
// alpha; alpha < -2/3 never accepts, and the CPU loops forever there) comes out NaN.
// Gamma(alpha, 1) draws for a flat alpha of dtype `ct` (f32 or f64), unfloored; alpha 0 gives 0.
Value gamma_draws(LoweringContext& ctx, Value alpha) {
  FunctionBuilder& b = ctx.b;
  const ElementType ct = alpha.dtype();
  const int d_bits = digits(ct);
  const ElementType bt = d_bits > 32 ? ElementType::kU64 : ElementType::kU32;
  const int64_t n = alpha.type.numel();
  TensorType row(ct, {n});
  auto c = [&](double v) { return b.constant(v, row); };
  auto [state, boost_bits] = shlo::rng_bit_generator(b, sampler_state(ctx), TensorType(bt, {n}));
  Value small = b.compare(alpha, c(1.0), CompareDirection::kLT);
  Value boost =
      b.binary("stablehlo.power", b.sub(c(1.0), uniform_from_bits(b, boost_bits, ct, d_bits)),
               b.div(c(1.0), alpha));
  Value scale = b.select(small, boost, c(1.0));
  Value a = b.select(small, b.add(alpha, c(1.0)), alpha);
  Value d = b.sub(a, c(1.0 / 3.0));
  Value cc = b.div(c(1.0), b.unary("stablehlo.sqrt", b.mul(c(9.0), d)));
  auto round = [&](FunctionBuilder& lb, const Values& u, const Values&,
                   const Values& fx) -> SamplerRound {
    auto k = [&](double v) { return lb.constant(v, row); };
    const Value &dd = fx[0], &cv = fx[1], &sc = fx[2];
    // Box-Muller normal, and 1 - U in (0, 1] as the CPU's acceptance uniform.
    Value radius = lb.unary("stablehlo.sqrt",
                            lb.mul(k(-2.0), lb.unary("stablehlo.log", lb.sub(k(1.0), u[0]))));
    Value x = lb.mul(radius, lb.unary("stablehlo.cosine", lb.mul(k(2 * M_PI), u[1])));
    Value uu = lb.sub(k(1.0), u[2]);
    Value y = lb.add(k(1.0), lb.mul(cv, x));
    Value v = lb.mul(lb.mul(y, y), y);
    Value xx = lb.mul(x, x);
    Value quick =
        lb.compare(uu, lb.sub(k(1.0), lb.mul(k(0.0331), lb.mul(xx, xx))), CompareDirection::kLT);
    Value logv = lb.unary("stablehlo.log", v);
    Value slow = lb.compare(lb.unary("stablehlo.log", uu),
                            lb.add(lb.mul(k(0.5), xx), lb.mul(dd, lb.add(lb.sub(k(1.0), v), logv))),
                            CompareDirection::kLT);
    Value accept = lb.binary("stablehlo.and", lb.compare(y, k(0.0), CompareDirection::kGT),
                             lb.binary("stablehlo.or", quick, slow));
    return {accept, lb.mul(lb.mul(sc, dd), v), {}};
  };
  Value drawn = run_sampler(b, state, b.constant(0, TensorType(ElementType::kPred, {n})), ct,
                            /*draws=*/3, /*max_rounds=*/256, {}, {d, cc, scale}, round);
  return b.select(b.compare(alpha, c(0.0), CompareDirection::kEQ), c(0.0), drawn);
}

// The smallest normal value of a float dtype (std::numeric_limits<T>::min()).
double smallest_normal(ElementType t) {
  return t == ElementType::kF64   ? std::numeric_limits<double>::min()
         : t == ElementType::kF16 ? std::ldexp(1.0, -14)
                                  : std::numeric_limits<float>::min();
}

std::vector<Value> lower_standard_gamma(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    Value alpha = b.reshape(b.convert(ctx.tensor(0), sample_type(out.dtype)), {out.numel()});
    Value rounded = b.convert(gamma_draws(ctx, alpha), out.dtype);
    Value floor = b.constant(smallest_normal(out.dtype), rounded.type);
    // max(min_normal, sample) keeping NaN, as the CPU's (min > sample ? min : sample).
    Value clamped = b.select(b.compare(floor, rounded, CompareDirection::kGT), floor, rounded);
    return b.reshape(clamped, out.shape);
  });
}

// _sample_dirichlet(self, generator): the CPU's _s_dirichlet: Gamma(alpha) draws in f64, each
// at least DBL_MIN, normalized over the last dim, then rounded and clamped to
// [smallest normal, the largest value below 1] of the result dtype.
std::vector<Value> lower_sample_dirichlet(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    TORCH_CHECK(out.rank() >= 1, "_sample_dirichlet: expected at least one dimension");
    const ElementType f64 = ElementType::kF64;
    Value alpha = b.reshape(b.convert(ctx.tensor(0), f64), {out.numel()});
    Value g = gamma_draws(ctx, alpha);
    g = b.max(g, b.constant(std::numeric_limits<double>::min(), g.type));
    g = b.reshape(g, out.shape);
    std::vector<int64_t> keep(out.shape.begin(), out.shape.end() - 1);
    std::vector<int64_t> dims(keep.size());
    for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
    Value sum =
        b.reduce_simple(g, b.constant(0, TensorType(f64, {})), {out.rank() - 1}, "stablehlo.add");
    Value ratio = b.div(g, b.broadcast_in_dim(sum, out.shape, dims));
    Value v = b.convert(ratio, out.dtype);
    double below_one = out.dtype == ElementType::kF64   ? std::nextafter(1.0, 0.0)
                       : out.dtype == ElementType::kF16 ? 1.0 - std::ldexp(1.0, -11)
                       : out.dtype == ElementType::kBF16
                           ? 1.0 - std::ldexp(1.0, -8)
                           : static_cast<double>(std::nextafter(1.0f, 0.0f));
    Value lo = b.constant(smallest_normal(out.dtype), v.type);
    Value hi = b.constant(below_one, v.type);
    // std::min(max, std::max(min, x)): NaN becomes min (std::max(min, NaN) is min).
    Value above = b.select(b.compare(v, lo, CompareDirection::kGT), v, lo);
    return b.select(b.compare(hi, above, CompareDirection::kLT), hi, above);
  });
}

// poisson(self, generator): the CPU's sample_poisson in f64: Knuth's product of uniforms for
// lambda < 10 (0 for lambda 0, and for negative or NaN lambda, as the CPU's loop gives), the
// transformed rejection method PTRS (Hoermann 1993) for lambda >= 10; one stablehlo.while whose
// rounds draw two uniforms per element from a ThreeFry state the loop carries. Negative or NaN
// rates raise the CPU's error (a device-side check). An element still undecided after 1024
// rounds (Knuth takes about lambda + 1 < 11, PTRS accepts above 90% a round; an infinite rate,
// where the CPU returns INT64_MIN, never decides) comes out NaN.
std::vector<Value> lower_poisson(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    const ElementType f64 = ElementType::kF64;
    const int64_t n = out.numel();
    TensorType row(f64, {n});
    auto c = [&](double v) { return b.constant(v, row); };
    auto un = [&](FunctionBuilder& fb, const char* name, Value x) { return fb.unary(name, x); };
    Value lam = b.reshape(b.convert(ctx.tensor(0), f64), {n});
    // The CPU's check on every rate (NaN included), raised at the next sync like other
    // device-side checks.
    Value valid =
        b.reduce_simple(b.compare(lam, c(0.0), CompareDirection::kGE),
                        b.constant(1, TensorType(ElementType::kPred, {})), {0}, "stablehlo.and");
    check(ctx, valid, "invalid Poisson rate, expected rate to be non-negative",
          /*index_error=*/false);
    Value slam = un(b, "stablehlo.sqrt", lam);
    Value loglam = un(b, "stablehlo.log", lam);
    Value bb = b.add(c(0.931), b.mul(c(2.53), slam));
    Value a = b.add(c(-0.059), b.mul(c(0.02483), bb));
    Value invalpha = b.add(c(1.1239), b.div(c(1.1328), b.sub(bb, c(3.4))));
    Value vr = b.sub(c(0.9277), b.div(c(3.6224), b.sub(bb, c(2.0))));
    Value enlam = un(b, "stablehlo.exponential", b.neg(lam));
    Value large = b.compare(lam, c(10.0), CompareDirection::kGE);
    // Not large and lambda == 0 (or anything Knuth ends at once) is decided in the first round.
    auto round = [&](FunctionBuilder& lb, const Values& u, const Values& vars,
                     const Values& fx) -> SamplerRound {
      auto k = [&](double v) { return lb.constant(v, row); };
      const Value &l = fx[0], &ll = fx[1], &bv = fx[2], &av = fx[3], &ia = fx[4], &vrv = fx[5],
                  &el = fx[6], &lg = fx[7];
      const Value &u1 = u[0], &u2 = u[1];
      // Knuth: prod *= U; X += 1 while prod > e^-lambda.
      Value prod = lb.mul(vars[0], u1);
      Value goes_on = lb.compare(prod, el, CompareDirection::kGT);
      Value knuth_done = lb.unary("stablehlo.not", goes_on);
      Value knuth_next = lb.select(goes_on, lb.add(vars[1], k(1.0)), vars[1]);
      // PTRS.
      Value uu = lb.sub(u1, k(0.5));
      Value us = lb.sub(k(0.5), lb.abs(uu));
      Value kk = lb.unary(
          "stablehlo.floor",
          lb.add(lb.mul(lb.add(lb.div(lb.mul(k(2.0), av), us), bv), uu), lb.add(l, k(0.43))));
      Value quick = lb.binary("stablehlo.and", lb.compare(us, k(0.07), CompareDirection::kGE),
                              lb.compare(u2, vrv, CompareDirection::kLE));
      Value reject =
          lb.binary("stablehlo.or", lb.compare(kk, k(0.0), CompareDirection::kLT),
                    lb.binary("stablehlo.and", lb.compare(us, k(0.013), CompareDirection::kLT),
                              lb.compare(u2, us, CompareDirection::kGT)));
      Value lhs = lb.sub(lb.add(lb.unary("stablehlo.log", u2), lb.unary("stablehlo.log", ia)),
                         lb.unary("stablehlo.log", lb.add(lb.div(av, lb.mul(us, us)), bv)));
      Value rhs =
          lb.sub(lb.add(lb.neg(l), lb.mul(kk, ll)), lb.unary("chlo.lgamma", lb.add(kk, k(1.0))));
      Value slow = lb.binary("stablehlo.and", lb.unary("stablehlo.not", reject),
                             lb.compare(lhs, rhs, CompareDirection::kLE));
      Value ptrs_done = lb.binary("stablehlo.or", quick, slow);
      return {lb.select(lg, ptrs_done, knuth_done), lb.select(lg, kk, vars[1]), {prod, knuth_next}};
    };
    Value drawn =
        run_sampler(b, sampler_state(ctx), b.constant(0, TensorType(ElementType::kPred, {n})), f64,
                    /*draws=*/2, /*max_rounds=*/1024, /*vars=*/{c(1.0), c(0.0)},
                    {lam, loglam, bb, a, invalpha, vr, enlam, large}, round);
    return b.reshape(b.convert(drawn, out.dtype), out.shape);
  });
}

// Stirling's series tail of log(k!) as the CPU's stirling_approx_tail: a table for k <= 9.
Value stirling_tail(FunctionBuilder& b, Value k) {
  static constexpr double kTail[10] = {0.0810614667953272,  0.0413406959554092, 0.0276779256849983,
                                       0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                                       0.0118967099458917,  0.0104112652619720, 0.00925546218271273,
                                       0.00833056343336287};
  auto c = [&](double v) { return b.constant(v, k.type); };
  Value kp1 = b.add(k, c(1.0));
  Value kp1sq = b.mul(kp1, kp1);
  Value r = b.div(
      b.sub(c(1.0 / 12), b.div(b.sub(c(1.0 / 360), b.div(c(1.0 / 1260), kp1sq)), kp1sq)), kp1);
  for (int i = 0; i < 10; ++i) {
    r = b.select(b.compare(k, c(i), CompareDirection::kEQ), c(kTail[i]), r);
  }
  return r;
}

// binomial(count, prob, generator): the CPU's sample_binomial in f64: 0 for count <= 0 or
// prob <= 0, count for prob >= 1, NaN for a NaN prob; otherwise with q = min(prob, 1 - prob)
// (and count - k when prob > 0.5) BTRS (Hormann's transformed rejection) when count * q >= 10,
// else inversion by sums of geometric draws; one stablehlo.while over all elements, two uniforms
// per element and round from a carried ThreeFry state. An element undecided after 1024 rounds
// comes out NaN.
std::vector<Value> lower_binomial(LoweringContext& ctx) {
  return unless_empty(ctx, [&](FunctionBuilder& b, const TensorType& out) {
    const ElementType f64 = ElementType::kF64;
    const int64_t n = out.numel();
    TensorType row(f64, {n});
    auto c = [&](double v) { return b.constant(v, row); };
    auto lg = [&](FunctionBuilder& fb, Value x) { return fb.unary("stablehlo.log", x); };
    Value count = b.reshape(b.convert(coerce(b, ctx.tensor(0), out), f64), {n});
    Value prob = b.reshape(b.convert(coerce(b, ctx.tensor(1), out), f64), {n});
    Value flip = b.compare(prob, c(0.5), CompareDirection::kGT);
    Value q = b.select(flip, b.sub(c(1.0), prob), prob);
    Value use_btrs = b.compare(b.mul(count, q), c(10.0), CompareDirection::kGE);
    Value logq = b.unary("stablehlo.log_plus_one", b.neg(q));
    Value stddev = b.unary("stablehlo.sqrt", b.mul(b.mul(count, q), b.sub(c(1.0), q)));
    Value bb = b.add(c(1.15), b.mul(c(2.53), stddev));
    Value a = b.add(b.add(c(-0.0873), b.mul(c(0.0248), bb)), b.mul(c(0.01), q));
    Value cc = b.add(b.mul(count, q), c(0.5));
    Value vr = b.sub(c(0.92), b.div(c(4.2), bb));
    Value rr = b.div(q, b.sub(c(1.0), q));
    Value alpha = b.mul(b.add(c(2.83), b.div(c(5.1), bb)), stddev);
    Value m = b.unary("stablehlo.floor", b.mul(b.add(count, c(1.0)), q));
    Value zero = b.binary("stablehlo.or", b.compare(count, c(0.0), CompareDirection::kLE),
                          b.compare(prob, c(0.0), CompareDirection::kLE));
    Value full = b.compare(prob, c(1.0), CompareDirection::kGE);
    Value nan_p = b.compare(prob, prob, CompareDirection::kNE);
    // Elements the special cases decide never enter the loop (their sampler constants are
    // degenerate: q = 0 would never finish).
    Value decided = b.binary("stablehlo.or", zero, b.binary("stablehlo.or", full, nan_p));
    auto round = [&](FunctionBuilder& lb, const Values& u, const Values& vars,
                     const Values& fx) -> SamplerRound {
      auto k_ = [&](double v) { return lb.constant(v, row); };
      const Value &cnt = fx[0], &lq = fx[1], &bt = fx[2], &bv = fx[3], &av = fx[4], &cv = fx[5],
                  &vrv = fx[6], &rv = fx[7], &al = fx[8], &mv = fx[9];
      const Value &u1 = u[0], &u2 = u[1];
      // Inversion: geom_sum += ceil(log U / log(1 - q)); done once it passes count.
      Value geom = lb.unary("stablehlo.ceil", lb.div(lg(lb, u1), lq));
      Value gsum = lb.add(vars[0], geom);
      Value inv_done = lb.compare(gsum, cnt, CompareDirection::kGT);
      Value inv_next = lb.select(inv_done, vars[1], lb.add(vars[1], k_(1.0)));
      // BTRS.
      Value uu = lb.sub(u1, k_(0.5));
      Value us = lb.sub(k_(0.5), lb.abs(uu));
      Value kk = lb.unary("stablehlo.floor",
                          lb.add(lb.mul(lb.add(lb.div(lb.mul(k_(2.0), av), us), bv), uu), cv));
      Value in_range = lb.binary("stablehlo.and", lb.compare(kk, k_(0.0), CompareDirection::kGE),
                                 lb.compare(kk, cnt, CompareDirection::kLE));
      Value quick = lb.binary("stablehlo.and", lb.compare(us, k_(0.07), CompareDirection::kGE),
                              lb.compare(u2, vrv, CompareDirection::kLE));
      Value vlog = lg(lb, lb.div(lb.mul(u2, al), lb.add(lb.div(av, lb.mul(us, us)), bv)));
      Value cm1 = lb.add(lb.sub(cnt, mv), k_(1.0));
      Value ck1 = lb.add(lb.sub(cnt, kk), k_(1.0));
      Value upper = lb.add(
          lb.add(lb.mul(lb.add(mv, k_(0.5)), lg(lb, lb.div(lb.add(mv, k_(1.0)), lb.mul(rv, cm1)))),
                 lb.mul(lb.add(cnt, k_(1.0)), lg(lb, lb.div(cm1, ck1)))),
          lb.mul(lb.add(kk, k_(0.5)), lg(lb, lb.div(lb.mul(rv, ck1), lb.add(kk, k_(1.0))))));
      upper =
          lb.add(upper, lb.sub(lb.add(stirling_tail(lb, mv), stirling_tail(lb, lb.sub(cnt, mv))),
                               lb.add(stirling_tail(lb, kk), stirling_tail(lb, lb.sub(cnt, kk)))));
      Value btrs_done = lb.binary(
          "stablehlo.and", in_range,
          lb.binary("stablehlo.or", quick, lb.compare(vlog, upper, CompareDirection::kLE)));
      return {lb.select(bt, btrs_done, inv_done), lb.select(bt, kk, vars[1]), {gsum, inv_next}};
    };
    Value drawn = run_sampler(b, sampler_state(ctx), decided, f64, /*draws=*/2, /*max_rounds=*/1024,
                              /*vars=*/{c(0.0), c(0.0)},
                              {count, logq, use_btrs, bb, a, cc, vr, rr, alpha, m}, round);
    Value k = b.select(flip, b.sub(count, drawn), drawn);
    // In the CPU's order: count <= 0 or prob <= 0 first, then prob >= 1, then a NaN prob.
    k = b.select(nan_p, c(NAN), k);
    k = b.select(full, count, k);
    k = b.select(zero, c(0.0), k);
    return b.reshape(b.convert(k, out.dtype), out.shape);
  });
}

TORCHTPU_GRAPH_LOWERING("aten::rand", lower_rand);
TORCHTPU_GRAPH_LOWERING("aten::rand.generator", lower_rand);
TORCHTPU_GRAPH_LOWERING("aten::rand_like", lower_rand);
TORCHTPU_GRAPH_LOWERING("aten::rand_like.generator", lower_rand);
TORCHTPU_GRAPH_LOWERING("aten::randn", lower_randn);
TORCHTPU_GRAPH_LOWERING("aten::randn.generator", lower_randn);
TORCHTPU_GRAPH_LOWERING("aten::randn_like", lower_randn);
TORCHTPU_GRAPH_LOWERING("aten::randn_like.generator", lower_randn);
TORCHTPU_GRAPH_LOWERING("aten::randint", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint.generator", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint.low", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint.low_generator", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint_like", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint_like.generator", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint_like.low_dtype", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randint_like.low_generator_dtype", lower_randint);
TORCHTPU_GRAPH_LOWERING("aten::randperm", lower_randperm);
TORCHTPU_GRAPH_LOWERING("aten::randperm.generator", lower_randperm);
// Eager torch.randperm(n, device="tpu") reaches the out= forms (the factory is composite: empty
// + randperm.generator_out), drawn from the op's generator like the other random ops.
TORCHTPU_LOWERING("aten::randperm.generator_out", lower_randperm);
TORCHTPU_LOWERING("aten::randperm.out", lower_randperm);
TORCHTPU_LOWERING("aten::_standard_gamma", lower_standard_gamma);
TORCHTPU_LOWERING("aten::_sample_dirichlet", lower_sample_dirichlet);
TORCHTPU_LOWERING("aten::poisson", lower_poisson);
TORCHTPU_LOWERING("aten::binomial", lower_binomial);
TORCHTPU_GRAPH_LOWERING("aten::normal.float_float", lower_normal);

TORCHTPU_LOWERING("aten::uniform", lower_uniform);
TORCHTPU_LOWERING("aten::normal_functional", lower_normal);
TORCHTPU_LOWERING("aten::normal.Tensor_float", lower_normal);
TORCHTPU_LOWERING("aten::normal.float_Tensor", lower_normal);
TORCHTPU_LOWERING("aten::normal.Tensor_Tensor", lower_normal);
// normal_ and bernoulli_.float have no functional overload of the same name for the kernel
// to map them onto, so they are lowered as themselves (the kernel writes self back).
TORCHTPU_LOWERING("aten::normal_", lower_normal);
TORCHTPU_LOWERING("aten::bernoulli_.float", bernoulli("p"));
TORCHTPU_LOWERING("aten::bernoulli", bernoulli(nullptr));
TORCHTPU_LOWERING("aten::bernoulli.p", bernoulli("p"));
TORCHTPU_LOWERING("aten::bernoulli.Tensor", bernoulli("p"));
TORCHTPU_LOWERING("aten::exponential", lower_exponential);
TORCHTPU_LOWERING("aten::log_normal", lower_log_normal);
TORCHTPU_LOWERING("aten::cauchy", lower_cauchy);
TORCHTPU_LOWERING("aten::geometric", lower_geometric);
TORCHTPU_LOWERING("aten::random.from", lower_random_from);
TORCHTPU_LOWERING("aten::random.to", lower_random_to);
TORCHTPU_LOWERING("aten::random", lower_random);

}  // namespace
}  // namespace torchtpu::lowering
