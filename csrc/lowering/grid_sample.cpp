// grid_sampler_2d / grid_sampler_3d (F.grid_sample) and their backwards, following ATen's CPU
// kernels: the grid is unnormalized per dim, mapped by the padding mode (border: clip;
// reflection: reflect, then clip) and sampled with bilinear (trilinear), nearest (round half to
// even) or bicubic (Keys, A = -0.75; 2d only) weights. Samples are a gather of
// (batch, flat spatial index) rows of the channels-last input, masked to zero out of bounds;
// grad_input is the matching scatter-add and grad_grid differentiates the weights, times the
// unnormalize scale and the padding mode's coordinate gradient (as the CPU kernels do).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

struct Sampler {
  Sampler(FunctionBuilder& builder, ElementType compute) : b(builder), ct(compute) {}

  FunctionBuilder& b;
  ElementType ct;               // compute dtype
  int64_t n = 0, c = 0, q = 0;  // batch, channels, output positions
  std::vector<int64_t> in_sp;   // input spatial sizes, (D,) H, W
  int64_t nd = 0;               // spatial dims
  int interp = 0, padding = 0;  // 0 bilinear/zeros, 1 nearest/border, 2 bicubic/reflection
  bool align = false;
  Value input;  // (N, P, C) in ct
  // False on TPU, where 64-bit arithmetic is emulated and costly (see mul_rounded).
  bool native_f64 = true;

  std::vector<int64_t> nq() const { return {n, q}; }
  Value full(double v) { return b.broadcast_to(b.constant(v, TensorType(ct, {})), nq()); }
  Value fulli(int64_t v) {
    return b.broadcast_to(b.constant_int(v, TensorType(ElementType::kS64, {})), nq());
  }
  // Size of coordinate k (k = 0: x / W, the last spatial dim).
  int64_t size_of(int64_t k) const { return in_sp[static_cast<size_t>(nd - 1 - k)]; }
  double scaling(int64_t k) const {
    int64_t s = size_of(k);
    if (ct == ElementType::kF64) {
      return align ? static_cast<double>(s - 1) / 2 : static_cast<double>(s) / 2;
    }
    return align ? static_cast<double>(static_cast<float>(s - 1) / 2)
                 : static_cast<double>(static_cast<float>(s) / 2);
  }
  // grid_sampler_3d runs ATen's scalar code (GridSampler.h), grid_sampler_2d its vectorized
  // kernel; their formulas round differently.
  bool scalar_ref() const { return nd == 3; }
  // a * s for a constant s, rounded to f32 before anything adds to it. XLA:CPU lets LLVM
  // contract a multiplication feeding an addition into one FMA (a single rounding), where the
  // scalar reference rounds the product first; fused, the unnormalized coordinate moved by an ulp,
  // which shifts every corner weight, and grad_grid (a sum of signed terms that mostly cancel)
  // differed from the CPU's by up to ~3e-4 relative. Neither an optimization barrier (removed
  // before codegen) nor an f64 product (LLVM narrows it back to an f32 multiply) keeps them
  // apart, so the exact f64 product is rounded to f32's 24 bits (to nearest even) on its bits.
  // Not on TPU, where 64-bit arithmetic is emulated and costly: the plain product there.
  Value mul_rounded(Value a, double s) {
    if (ct != ElementType::kF32 || !native_f64) return b.mul(a, full(s));
    auto i64 = [&](int64_t v) {
      return b.broadcast_to(b.constant_int(v, TensorType(ElementType::kS64, {})), nq());
    };
    Value d = b.mul(b.convert(a, ElementType::kF64),
                    b.broadcast_to(b.constant(s, TensorType(ElementType::kF64, {})), nq()));
    Value bits = b.bitcast_convert(d, ElementType::kS64);
    Value lsb =
        b.binary("stablehlo.and", b.binary("stablehlo.shift_right_logical", bits, i64(29)), i64(1));
    Value r = b.binary("stablehlo.and", b.add(bits, b.add(i64(0x0FFFFFFF), lsb)),
                       i64(~int64_t{0x1FFFFFFF}));
    Value finite = shlo::is_finite(b, d);
    d = b.select(finite, b.bitcast_convert(r, ElementType::kF64), d);
    return b.convert(d, ElementType::kF32);  // exact: d has at most 24 significant bits
  }
  Value unnormalize(Value g, int64_t k) {
    if (scalar_ref()) {
      double size = static_cast<double>(size_of(k));
      Value p1 = b.add(g, full(1));
      if (align) return mul_rounded(b.div(p1, full(2)), size - 1);
      return b.div(b.sub(mul_rounded(p1, size), full(1)), full(2));
    }
    Value r = b.mul(b.add(g, full(1)), full(scaling(k)));
    return align ? r : b.sub(r, full(0.5));
  }
  // a / d for a constant d, kept a true division (XLA would turn a division by a constant into
  // a multiplication by its rounded reciprocal, moving the floor of the quotient at the edges).
  Value exact_div(Value a, double d) {
    Value dv = shlo::optimization_barrier(b, {full(d)})[0];
    return b.div(a, dv);
  }
  Value lt(Value a, Value x) { return b.compare(a, x, CompareDirection::kLT); }
  Value gt(Value a, Value x) { return b.compare(a, x, CompareDirection::kGT); }
  Value and_(Value a, Value x) { return b.binary("stablehlo.and", a, x); }
  Value clip(Value in, int64_t k) {
    return b.min(b.max(in, full(0)), full(static_cast<double>(size_of(k) - 1)));
  }
  // Within int32 (false for NaN and +-inf): the CPU kernels turn coordinates into int32
  // indices, and only coordinates in range can land in bounds.
  Value int_range(Value x) {
    return and_(b.compare(x, full(-2147483648.0), CompareDirection::kGE),
                b.compare(x, full(2147483646.0), CompareDirection::kLE));
  }
  // compute_coordinates: the padding mode, then (the scalar reference's
  // safe_downgrade_to_int_range) -100 for a coordinate outside int range or not finite, so it
  // samples nothing, with the coordinate's gradient multiplier.
  std::pair<Value, Value> coordinates(Value in, int64_t k) {
    auto r = padded_coordinates(in, k);
    if (scalar_ref()) r.first = b.select(int_range(r.first), r.first, full(-100));
    return r;
  }
  std::pair<Value, Value> padded_coordinates(Value in, int64_t k) {
    int64_t size = size_of(k);
    double maxv = static_cast<double>(size - 1);
    if (padding == 0) return {in, full(1)};
    Value sign = full(1);
    if (padding == 2 && scalar_ref()) {
      double tl = align ? 0.0 : -1.0;
      double th = align ? 2.0 * static_cast<double>(size - 1) : 2.0 * static_cast<double>(size) - 1;
      if (tl == th) return {full(0), full(0)};
      double mn = tl / 2, span = (th - tl) / 2;
      Value below = lt(in, full(mn));
      Value sgn = b.select(below, full(-1), full(1));
      Value a = b.select(below, b.sub(full(mn), in), b.sub(in, full(mn)));
      Value flips = b.unary("stablehlo.floor", exact_div(a, span));
      // fmod(a, span): flips * span and the difference are exact.
      Value extra = b.sub(a, b.mul(flips, full(span)));
      Value even = b.compare(b.binary("stablehlo.remainder", flips, full(2)), full(0),
                             CompareDirection::kEQ);
      in = b.select(even, b.add(extra, full(mn)), b.add(b.sub(full(span), extra), full(mn)));
      sign = b.select(even, sgn, b.neg(sgn));
    } else if (padding == 2) {
      bool empty = align ? size <= 1 : size <= 0;
      if (empty) return {full(0), full(0)};
      double low = align ? 0.0 : -0.5;
      double ts = align ? 2.0 * static_cast<double>(size - 1) : 2.0 * static_cast<double>(size);
      Value m = b.sub(in, full(low));
      Value neg = lt(m, full(0));
      Value a = b.unary("stablehlo.abs", m);
      Value d = exact_div(a, ts);
      Value flips =
          b.select(lt(d, full(0)), b.unary("stablehlo.ceil", d), b.unary("stablehlo.floor", d));
      Value extra = b.sub(a, b.mul(flips, full(ts)));
      Value refl = b.sub(full(ts), extra);
      Value more = gt(extra, refl);
      in = b.add(b.select(more, refl, extra), full(low));
      sign = b.select(b.binary("stablehlo.xor", more, neg), full(-1), full(1));
    }
    Value inside = and_(gt(in, full(0)), lt(in, full(maxv)));
    return {clip(in, k), b.select(inside, sign, full(0))};
  }
  Value in_bounds(Value idx, int64_t k) {
    return and_(b.compare(idx, fulli(-1), CompareDirection::kGT),
                b.compare(idx, fulli(size_of(k)), CompareDirection::kLT));
  }
  // (N, Q, 2) gather coordinates of integer per-coordinate indices (clamped; callers mask).
  Value coords(const std::vector<Value>& idx) {
    std::optional<Value> lin;
    int64_t stride = 1;
    for (int64_t k = 0; k < nd; ++k) {
      Value i = b.clamp(b.constant_int(0, TensorType(ElementType::kS64, {})), idx[k],
                        b.constant_int(size_of(k) - 1, TensorType(ElementType::kS64, {})));
      Value t = b.mul(i, fulli(stride));
      lin = lin ? b.add(*lin, t) : t;
      stride *= size_of(k);
    }
    Value batch = b.iota(TensorType(ElementType::kS64, {n, q, 1}), 0);
    return b.concatenate({batch, b.reshape(*lin, {n, q, 1})}, 2);
  }
  Value bcast(Value v) { return b.broadcast_in_dim(v, {n, q, c}, {0, 1}); }
  // Values at idx, (N, Q, C), zero where !mask.
  Value gather(const std::vector<Value>& idx, Value mask) {
    Value r = b.gather(input, coords(idx), {{2}, {0, 1}, {0, 1}, 2}, {1, 1, c},
                       TensorType(ct, {n, q, c}));
    return b.select(bcast(mask), r, zeros(b, r.type));
  }
  // grad (N, P, C) += upd (N, Q, C) at idx where mask.
  Value scatter(Value grad, const std::vector<Value>& idx, Value mask, Value upd) {
    upd = b.select(bcast(mask), upd, zeros(b, upd.type));
    return b.scatter(grad, coords(idx), upd, {{2}, {0, 1}, {0, 1}, 2}, add_region);
  }
  // One scatter-add of K corners' updates, point-major then corner (the CPU kernel's order of
  // accumulation): coords (N, Q, 2) and masked updates (N, Q, C) per corner.
  Value scatter_all(Value grad, const std::vector<Value>& cs, const std::vector<Value>& ups) {
    auto k = static_cast<int64_t>(cs.size());
    std::vector<Value> c4, u4;
    for (size_t i = 0; i < cs.size(); ++i) {
      c4.push_back(b.reshape(cs[i], {n, q, 1, 2}));
      u4.push_back(b.reshape(ups[i], {n, q, 1, c}));
    }
    Value ci = b.reshape(b.concatenate(c4, 2), {n * q * k, 2});
    Value ui = b.reshape(b.concatenate(u4, 2), {n * q * k, c});
    return b.scatter(grad, ci, ui, {{1}, {0, 1}, {0, 1}, 1}, add_region);
  }
  Value to_int(Value v) { return b.convert(v, ElementType::kS64); }
  Value sum_c(Value v) {
    return b.reduce_simple(v, b.constant(0, TensorType(ct, {})), {2}, "stablehlo.add");
  }

  std::vector<Value> cubic(Value t) {
    const double a = -0.75;
    auto c1 = [&](Value x) {
      return b.add(b.mul(b.mul(b.sub(b.mul(full(a + 2), x), full(a + 3)), x), x), full(1));
    };
    auto c2 = [&](Value x) {
      return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(full(a), x), full(5 * a)), x), full(8 * a)), x),
                   full(4 * a));
    };
    return {c2(b.add(t, full(1))), c1(t), c1(b.sub(full(1), t)), c2(b.sub(full(2), t))};
  }
  std::vector<Value> cubic_grad(Value t) {
    const double a = -0.75;
    Value x0 = b.sub(full(-1), t), x1 = b.neg(t), x2 = b.sub(full(1), t), x3 = b.sub(full(2), t);
    return {b.sub(b.mul(b.sub(b.mul(full(-3 * a), x0), full(10 * a)), x0), full(8 * a)),
            b.mul(b.sub(b.mul(full(-3 * (a + 2)), x1), full(2 * (a + 3))), x1),
            b.mul(b.sub(b.mul(full(3 * (a + 2)), x2), full(2 * (a + 3))), x2),
            b.add(b.mul(b.sub(b.mul(full(3 * a), x3), full(10 * a)), x3), full(8 * a))};
  }

  // Forward (gout absent) or backward: returns out (N, Q, C), or (grad_input, grad_grid
  // per coordinate (N, Q)).
  struct Result {
    std::optional<Value> out, gin;
    std::vector<Value> ggrid;
  };
  Result run(const std::vector<Value>& grid, std::optional<Value> gout, bool want_gin) {
    Result res;
    std::optional<Value> gin;
    if (gout && want_gin) gin = zeros(b, input.type);
    std::optional<Value> out;
    auto acc = [&](std::optional<Value>& s, Value v) { s = s ? b.add(*s, v) : v; };
    if (interp == 2) {
      std::vector<Value> t, fl;
      std::vector<std::vector<Value>> co, cg;
      for (int64_t k = 0; k < nd; ++k) {
        Value x = unnormalize(grid[k], k);
        fl.push_back(b.unary("stablehlo.floor", x));
        t.push_back(b.sub(x, fl.back()));
        co.push_back(cubic(t.back()));
        if (gout) cg.push_back(cubic_grad(t.back()));
      }
      std::optional<Value> gx, gy;
      for (int64_t j = 0; j < 4; ++j) {  // y tap
        std::optional<Value> row;
        for (int64_t i = 0; i < 4; ++i) {  // x tap
          std::vector<Value> idx;
          std::optional<Value> mask;
          int64_t tap[2] = {i, j};
          for (int64_t k = 0; k < nd; ++k) {
            Value p = coordinates(b.add(fl[k], full(static_cast<double>(tap[k] - 1))), k).first;
            Value m = and_(gt(p, full(-1)), lt(p, full(static_cast<double>(size_of(k)))));
            mask = mask ? and_(*mask, m) : m;
            idx.push_back(to_int(p));
          }
          Value v = gather(idx, *mask);
          if (!gout) {
            acc(row, b.mul(v, bcast(co[0][i])));
            continue;
          }
          Value vg = b.mul(v, *gout);
          if (gin) {
            gin = scatter(*gin, idx, *mask, b.mul(*gout, bcast(b.mul(co[0][i], co[1][j]))));
          }
          acc(gx, b.neg(b.mul(sum_c(vg), b.mul(cg[0][i], co[1][j]))));
          acc(gy, b.neg(b.mul(sum_c(vg), b.mul(co[0][i], cg[1][j]))));
        }
        if (!gout) acc(out, b.mul(bcast(co[1][j]), *row));
      }
      if (gout) {
        res.ggrid = {b.mul(*gx, full(scaling(0))), b.mul(*gy, full(scaling(1)))};
      }
    } else {
      std::vector<Value> x, mult;
      for (int64_t k = 0; k < nd; ++k) {
        auto [cc, g] = coordinates(unnormalize(grid[k], k), k);
        x.push_back(cc);
        mult.push_back(b.mul(g, full(scaling(k))));
      }
      if (interp == 1) {
        std::vector<Value> idx;
        std::optional<Value> mask;
        for (int64_t k = 0; k < nd; ++k) {
          Value r = b.unary("stablehlo.round_nearest_even", x[k]);
          idx.push_back(to_int(r));
          Value m = and_(in_bounds(idx.back(), k), int_range(r));
          mask = mask ? and_(*mask, m) : m;
        }
        if (!gout) {
          out = gather(idx, *mask);
        } else {
          if (gin) gin = scatter(*gin, idx, *mask, *gout);
          for (int64_t k = 0; k < nd; ++k) res.ggrid.push_back(full(0));
        }
      } else {
        std::vector<Value> i0, w1, w0;
        for (int64_t k = 0; k < nd; ++k) {
          Value f = b.unary("stablehlo.floor", x[k]);
          i0.push_back(to_int(f));
          w1.push_back(b.sub(x[k], f));
          w0.push_back(scalar_ref() ? b.sub(b.add(f, full(1)), x[k]) : b.sub(full(1), w1.back()));
        }
        std::vector<std::optional<Value>> gk(static_cast<size_t>(nd));
        struct Term {
          int64_t k;
          bool plus;
          Value v;  // (N, Q, C)
        };
        std::vector<Term> terms;
        std::vector<Value> gin_coords, gin_updates;
        // Whether a corner takes the upper neighbour along coordinate k. The 3-d reference adds
        // corners with x fastest and z slowest (tnw, tne, tsw, tse, bnw, ...); its sums (grad_grid
        // accumulates signed terms that mostly cancel) only match in that order. The 2-d kernel
        // is vectorized differently and keeps the order it was matched with.
        auto hi_bit = [&](int64_t corner, int64_t k) -> bool {
          return scalar_ref() ? (corner >> k) & 1 : (corner >> (nd - 1 - k)) & 1;
        };
        for (int64_t corner = 0; corner < (int64_t{1} << nd); ++corner) {
          std::vector<Value> idx;
          std::optional<Value> mask, w;
          for (int64_t k = 0; k < nd; ++k) {
            bool hi = hi_bit(corner, k);
            idx.push_back(hi ? b.add(i0[k], fulli(1)) : i0[k]);
            Value m = and_(in_bounds(idx.back(), k), int_range(x[k]));
            mask = mask ? and_(*mask, m) : m;
          }
          for (int64_t kk = 0; kk < nd; ++kk) {
            int64_t k = scalar_ref() ? kk : nd - 1 - kk;
            bool hi = hi_bit(corner, k);
            Value wk = hi ? w1[k] : w0[k];
            w = w ? b.mul(*w, wk) : wk;
          }
          Value v = gather(idx, *mask);
          if (!gout) {
            acc(out, b.mul(v, bcast(*w)));
            continue;
          }
          if (gin && scalar_ref()) {
            Value upd = b.mul(*gout, bcast(*w));
            gin_coords.push_back(coords(idx));
            gin_updates.push_back(b.select(bcast(*mask), upd, zeros(b, upd.type)));
          } else if (gin) {
            gin = scatter(*gin, idx, *mask, b.mul(*gout, bcast(*w)));
          }
          Value vg = scalar_ref() ? v : sum_c(b.mul(v, *gout));
          for (int64_t k = 0; k < nd; ++k) {
            std::optional<Value> others;
            for (int64_t ee = 0; ee < nd; ++ee) {
              int64_t e = scalar_ref() ? ee : nd - 1 - ee;
              if (e == k) continue;
              bool hi = hi_bit(corner, e);
              Value we = hi ? w1[e] : w0[e];
              others = others ? b.mul(*others, we) : we;
            }
            bool hi = hi_bit(corner, k);
            if (scalar_ref()) {
              // ATen's ((val * w) * w) * gOut per channel, accumulated in its order below.
              Value term = vg;
              for (int64_t e = 0; e < nd; ++e) {
                if (e == k) continue;
                bool he = hi_bit(corner, e);
                term = b.mul(term, bcast(he ? w1[e] : w0[e]));
              }
              terms.push_back({k, hi, b.mul(term, *gout)});
              continue;
            }
            Value term = others ? b.mul(vg, *others) : vg;
            acc(gk[k], hi ? term : b.neg(term));
          }
        }
        if (gout) {
          if (gin && scalar_ref()) gin = scatter_all(*gin, gin_coords, gin_updates);
          if (scalar_ref()) {
            // The CPU kernel adds channel by channel, every corner within a channel: the same
            // sequence (unrolled for up to 64 channels; a reduction beyond).
            if (c <= 64) {
              for (int64_t ch = 0; ch < c; ++ch) {
                for (const Term& t : terms) {
                  Value v = b.reshape(b.slice(t.v, {0, 0, ch}, {n, q, ch + 1}, {1, 1, 1}), nq());
                  gk[t.k] = gk[t.k] ? (t.plus ? b.add(*gk[t.k], v) : b.sub(*gk[t.k], v))
                                    : (t.plus ? v : b.neg(v));
                }
              }
            } else {
              for (const Term& t : terms) {
                Value v = sum_c(t.v);
                gk[t.k] = gk[t.k] ? (t.plus ? b.add(*gk[t.k], v) : b.sub(*gk[t.k], v))
                                  : (t.plus ? v : b.neg(v));
              }
            }
          }
          for (int64_t k = 0; k < nd; ++k) res.ggrid.push_back(b.mul(mult[k], *gk[k]));
        }
      }
    }
    res.out = out;
    res.gin = gin;
    return res;
  }
};

// Sets up the sampler from (input, grid, interpolation_mode, padding_mode, align_corners)
// starting at argument `first`; returns the per-coordinate grid values (N, Q).
std::vector<Value> setup(LoweringContext& ctx, Sampler& s, size_t first, int64_t nd) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(first), grid = ctx.tensor(first + 1);
  s.interp = static_cast<int>(ctx.int_arg(first + 2));
  s.padding = static_cast<int>(ctx.int_arg(first + 3));
  s.align = ctx.bool_arg(first + 4);
  TORCH_CHECK(s.interp >= 0 && s.interp <= 2 && !(nd == 3 && s.interp == 2),
              "torchtpu lowering: ", ctx.schema().name(), ": unsupported interpolation mode ",
              s.interp);
  TORCH_CHECK(s.padding >= 0 && s.padding <= 2, "torchtpu lowering: ", ctx.schema().name(),
              ": unsupported padding mode ", s.padding);
  s.nd = nd;
  s.ct = opmath_type(x.dtype());
  s.n = x.shape()[0];
  s.c = x.shape()[1];
  s.in_sp.assign(x.shape().begin() + 2, x.shape().end());
  int64_t p = 1;
  for (int64_t v : s.in_sp) p *= v;
  s.q = 1;
  for (int64_t d = 1; d < grid.rank() - 1; ++d) s.q *= grid.shape()[static_cast<size_t>(d)];
  s.input = b.transpose(b.reshape(b.convert(x, s.ct), {s.n, s.c, p}), {0, 2, 1});
  Value g = b.reshape(b.convert(grid, s.ct), {s.n, s.q, nd});
  std::vector<Value> r;
  for (int64_t k = 0; k < nd; ++k) {
    r.push_back(b.reshape(b.slice(g, {0, 0, k}, {s.n, s.q, k + 1}, {1, 1, 1}), {s.n, s.q}));
  }
  return r;
}

LoweringFn grid_sampler(int64_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    if (out.numel() == 0 || ctx.tensor(0).type.numel() == 0) return {zeros(b, out)};
    Sampler s{b, ElementType::kF32};
    s.native_f64 = ctx.platform() != "tpu";
    std::vector<Value> grid = setup(ctx, s, 0, nd);
    Value r = *s.run(grid, std::nullopt, false).out;  // (N, Q, C)
    return {coerce(b, b.reshape(b.transpose(r, {0, 2, 1}), out.shape), out)};
  };
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
//                              align_corners, output_mask) -> (grad_input, grad_grid), and
// _grid_sampler_2d_cpu_fallback_backward, the same without output_mask (both gradients).
LoweringFn grid_sampler_backward(int64_t nd) {
  return [nd](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const bool has_mask = ctx.schema().arguments().size() > 6;
    const bool want_input =
        !has_mask || ctx.arg(ctx.index_of("output_mask")).ivalue.toBoolList().get(0);
    Value x = ctx.tensor(1), grid = ctx.tensor(2), go = ctx.tensor(0);
    std::vector<std::optional<Value>> r(2);
    if (x.type.numel() == 0 || grid.type.numel() == 0) {
      if (want_input) r[0] = zeros(b, x.type);
      r[1] = zeros(b, grid.type);
      return masked_results(ctx, r);
    }
    Sampler s{b, ElementType::kF32};
    s.native_f64 = ctx.platform() != "tpu";
    std::vector<Value> g = setup(ctx, s, 1, nd);
    Value gout = b.transpose(b.reshape(b.convert(go, s.ct), {s.n, s.c, s.q}), {0, 2, 1});
    Sampler::Result res = s.run(g, gout, want_input);
    if (want_input) {
      r[0] = b.reshape(b.transpose(*res.gin, {0, 2, 1}), x.shape());
    }
    std::vector<Value> parts;
    for (Value v : res.ggrid) parts.push_back(b.reshape(v, {s.n, s.q, 1}));
    r[1] = b.reshape(b.concatenate(parts, 2), grid.shape());
    return masked_results(ctx, r);
  };
}

TORCHTPU_LOWERING("aten::grid_sampler_2d", grid_sampler(2));
TORCHTPU_LOWERING("aten::grid_sampler_3d", grid_sampler(3));
TORCHTPU_LOWERING("aten::grid_sampler_2d_backward", grid_sampler_backward(2));
TORCHTPU_LOWERING("aten::grid_sampler_3d_backward", grid_sampler_backward(3));
// PyTorch's reference form of the 2-D sampler (the CPU kernel's scalar loop, callable as
// torch.ops.aten._grid_sampler_2d_cpu_fallback): a CompositeExplicitAutograd kernel that reads
// the tensors' memory through host pointers, so on tpu it read no data and returned zeros.
// Its results are grid_sampler_2d's, so it lowers to the same sampler.
TORCHTPU_LOWERING("aten::_grid_sampler_2d_cpu_fallback", grid_sampler(2));
TORCHTPU_LOWERING("aten::_grid_sampler_2d_cpu_fallback_backward", grid_sampler_backward(2));

}  // namespace
}  // namespace torchtpu::lowering
