// CTC loss (_ctc_loss and _ctc_loss_backward, int[] or Tensor lengths), as ATen's CPU kernels
// (LossCTC.cpp): the alpha recursion over time in log space with the CPU's
// log(sum exp(l - max)) + max step (max -inf taken as 0), the likelihood from the last two
// states, and the backward's beta recursion, alpha + beta log-summed per target character, and
// grad = (exp(lp) - exp(lab + nll - lp)) * grad_out for t < input_length (0 after, and 0 for the
// whole sample when zero_infinity and the loss is infinite). Each recursion is one
// stablehlo.while over time, so the program (and its compile time) does not grow with T; every
// step runs over the whole batch, each sample frozen past its input length by masks.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <limits>
#include <string>

#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Loop counters and dynamic slice starts.
const TensorType kIdx(ElementType::kS64, {});

Value lengths_value(LoweringContext& ctx, size_t i, int64_t n) {
  FunctionBuilder& b = ctx.b;
  if (ctx.arg(i).kind == LArg::Kind::kTensor) {
    return b.reshape(b.convert(ctx.tensor(i), ElementType::kS64), {n});
  }
  std::vector<int64_t> v = ctx.int_list(i);
  TORCH_CHECK(static_cast<int64_t>(v.size()) == n, "ctc_loss: expected ", n, " lengths, got ",
              v.size());
  std::vector<Value> parts;
  for (int64_t x : v) parts.push_back(b.constant_int(x, TensorType(ElementType::kS64, {1})));
  return b.concatenate(parts, 0);
}

struct Ctc {
  int64_t t = 0, n = 0, c = 0, l = 0;
  Value lp;      // (T, N, C) in ct
  Value lpp;     // (T, N, L): log_probs at the extended target of each state
  Value prime;   // (N, L) i64
  Value skip;    // (N, L) i1: state s may come from s - 2
  Value il, tl;  // (N) i64
  ElementType ct;
};

// Shifts (N, L) by k along L (k > 0: towards higher s), filling -inf.
Value shift(FunctionBuilder& b, Value v, int64_t k) {
  int64_t n = v.shape()[0], l = v.shape()[1];
  Value ninf = b.constant(kNegInf, TensorType(v.dtype(), {}));
  if (k > 0) {
    return b.slice(b.pad(v, ninf, {0, k}, {0, 0}, {0, 0}), {0, 0}, {n, l}, {1, 1});
  }
  return b.slice(b.pad(v, ninf, {0, 0}, {0, -k}, {0, 0}), {0, -k}, {n, l - k}, {1, 1});
}

// log(exp(a - m) + exp(b - m) + exp(c - m)) + m + add, m = max (0 when -inf).
Value log3(FunctionBuilder& b, Value x, Value y, Value z, Value add) {
  Value m = b.max(b.max(x, y), z);
  Value ninf = b.constant(kNegInf, m.type);
  m = b.select(b.compare(m, ninf, CompareDirection::kEQ), b.constant(0, m.type), m);
  auto e = [&](Value v) { return b.unary("stablehlo.exponential", b.sub(v, m)); };
  Value s = b.add(b.add(e(x), e(y)), e(z));
  return b.add(b.add(b.unary("stablehlo.log", s), m), add);
}

Ctc setup(LoweringContext& ctx, size_t lp_i, size_t tg_i, size_t il_i, size_t tl_i, int64_t l,
          int64_t blank) {
  FunctionBuilder& b = ctx.b;
  Ctc g;
  Value lp = ctx.tensor(lp_i);
  TORCH_CHECK(lp.rank() == 3, "ctc_loss: torchtpu expects batched (T, N, C) log_probs");
  g.t = lp.shape()[0];
  g.n = lp.shape()[1];
  g.c = lp.shape()[2];
  g.l = l;
  g.ct = lp.dtype() == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
  g.lp = b.convert(lp, g.ct);
  g.il = lengths_value(ctx, il_i, g.n);
  g.tl = lengths_value(ctx, tl_i, g.n);
  int64_t max_s = (l - 1) / 2;
  TensorType pt(ElementType::kS64, {g.n, l});
  Value blank_c = b.constant_int(blank, pt);
  if (max_s == 0) {
    g.prime = blank_c;
  } else {
    Value tg = b.convert(ctx.tensor(tg_i), ElementType::kS64);
    int64_t k = tg.type.numel();
    TensorType it(ElementType::kS64, {g.n, max_s});
    Value base;
    if (tg.rank() == 1) {
      // Concatenated targets: sample b starts at the sum of the earlier target lengths.
      TensorType nn(ElementType::kS64, {g.n, g.n});
      Value before = b.compare(b.iota(nn, 1), b.iota(nn, 0), CompareDirection::kLT);
      base = b.reduce_simple(
          b.select(before, b.broadcast_in_dim(g.tl, nn.shape, {1}), b.constant_int(0, nn)),
          b.constant_int(0, TensorType(ElementType::kS64, {})), {1}, "stablehlo.add");
    } else {
      base = b.mul(b.iota(TensorType(ElementType::kS64, {g.n}), 0),
                   b.constant_int(tg.shape()[1], TensorType(ElementType::kS64, {g.n})));
    }
    Value idx = b.add(b.broadcast_in_dim(base, it.shape, {0}), b.iota(it, 1));
    idx = b.clamp(b.constant_int(0, it), idx, b.constant_int(std::max<int64_t>(k - 1, 0), it));
    Value flat = b.reshape(tg, {k});
    Value tgt = b.gather(flat, b.reshape(idx, {g.n, max_s, 1}), {{}, {0}, {0}, 2}, {1}, it);
    // prime[s] = s odd ? tgt[(s - 1) / 2] : blank: interleave (blank, tgt) pairs + final blank.
    Value pairs = b.concatenate(
        {b.reshape(b.constant_int(blank, it), {g.n, max_s, 1}), b.reshape(tgt, {g.n, max_s, 1})},
        2);
    g.prime = b.concatenate({b.reshape(pairs, {g.n, 2 * max_s}),
                             b.constant_int(blank, TensorType(ElementType::kS64, {g.n, 1}))},
                            1);
  }
  // skip[s]: s > 1 and prime[s - 2] != prime[s].
  Value p2 = b.slice(b.pad(g.prime, b.constant_int(blank, TensorType(ElementType::kS64, {})),
                           {0, 2}, {0, 0}, {0, 0}),
                     {0, 0}, {g.n, l}, {1, 1});
  g.skip = b.binary("stablehlo.and",
                    b.compare(b.iota(pt, 1), b.constant_int(1, pt), CompareDirection::kGT),
                    b.compare(p2, g.prime, CompareDirection::kNE));
  // lpp[t, b, s] = lp[t, b, prime[b, s]].
  TensorType ct3(ElementType::kS64, {g.t, g.n, l, 1});
  Value coords = b.concatenate(
      {b.iota(ct3, 0), b.iota(ct3, 1),
       b.reshape(b.broadcast_in_dim(g.prime, {g.t, g.n, l}, {1, 2}), {g.t, g.n, l, 1})},
      3);
  g.lpp = b.gather(g.lp, coords, {{}, {0, 1, 2}, {0, 1, 2}, 3}, {1, 1, 1},
                   TensorType(g.ct, {g.t, g.n, l}));
  return g;
}

Value row(FunctionBuilder& b, const Ctc& g, Value v3, int64_t t) {
  return b.reshape(b.slice(v3, {t, 0, 0}, {t + 1, g.n, g.l}, {1, 1, 1}), {g.n, g.l});
}

// Row t (a 0-d i64 Value) of a (T, N, L) value, as (N, L).
Value row_at(FunctionBuilder& b, const Ctc& g, Value v3, Value t) {
  Value zero = b.constant_int(0, kIdx);
  Value r = shlo::dynamic_slice(b, v3, {t, zero, zero}, {1, g.n, g.l});
  return b.reshape(r, {g.n, g.l});
}

// (N, L) value at s = idx (N), -inf where idx is out of range.
Value pick_in_range(FunctionBuilder& b, Value v, Value idx) {
  TensorType it(ElementType::kS64, v.shape());
  Value hit =
      b.compare(b.iota(it, 1), b.broadcast_in_dim(idx, v.shape(), {0}), CompareDirection::kEQ);
  return b.reduce_simple(b.select(hit, v, b.constant(kNegInf, v.type)),
                         b.constant(kNegInf, TensorType(v.dtype(), {})), {1}, "stablehlo.maximum");
}

// _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
std::vector<Value> lower_ctc_loss(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& la_t = ctx.out_type(1);
  int64_t blank = ctx.int_arg(4);
  Ctc g = setup(ctx, 0, 1, 2, 3, la_t.shape[2], blank);
  TensorType nl(g.ct, {g.n, g.l});
  TensorType pt(ElementType::kS64, {g.n, g.l});
  Value ninf = b.constant(kNegInf, nl);
  Value s_idx = b.iota(pt, 1);
  Value tl2 = b.broadcast_in_dim(g.tl, pt.shape, {0});
  Value first = b.binary(
      "stablehlo.or", b.compare(s_idx, b.constant_int(0, pt), CompareDirection::kEQ),
      b.binary("stablehlo.and", b.compare(s_idx, b.constant_int(1, pt), CompareDirection::kEQ),
               b.compare(tl2, b.constant_int(0, pt), CompareDirection::kGT)));
  Value alpha = b.select(first, row(b, g, g.lpp, 0), ninf);
  TensorType nt(ElementType::kS64, {g.n});
  Value last_t = b.sub(g.il, b.constant_int(1, nt));
  // log_alpha (N, T, L) fills row by row; rows at and past a sample's input length are never
  // read (the CPU leaves them uninitialized).
  Value log_alpha = b.dynamic_update_slice(
      b.constant(kNegInf, TensorType(g.ct, {g.n, g.t, g.l})), b.reshape(alpha, {g.n, 1, g.l}),
      {b.constant_int(0, kIdx), b.constant_int(0, kIdx), b.constant_int(0, kIdx)});
  // for t in [1, T): alpha = step(alpha, lpp[t]); final_row = alpha where t == input_length - 1.
  // Everything the body reads is carried, so the regions capture nothing from above.
  std::vector<Value> st = b.while_loop(
      {b.constant_int(1, kIdx), alpha, alpha, log_alpha, g.lpp, g.skip, last_t},
      [&](FunctionBuilder& ib, const std::vector<Value>& v) {
        return std::vector<Value>{
            ib.compare(v[0], ib.constant_int(g.t, kIdx), CompareDirection::kLT)};
      },
      [&](FunctionBuilder& ib, const std::vector<Value>& v) {
        Value t = v[0], a = v[1];
        Value ninf_i = ib.constant(kNegInf, nl);
        Value la3 = ib.select(v[5], shift(ib, a, 2), ninf_i);
        Value next = log3(ib, a, shift(ib, a, 1), la3, row_at(ib, g, v[4], t));
        Value is_last = ib.broadcast_in_dim(
            ib.compare(v[6], ib.broadcast_in_dim(t, nt.shape, {}), CompareDirection::kEQ), nl.shape,
            {0});
        Value zero = ib.constant_int(0, kIdx);
        Value la = ib.dynamic_update_slice(v[3], ib.reshape(next, {g.n, 1, g.l}), {zero, t, zero});
        return std::vector<Value>{ib.add(t, ib.constant_int(1, kIdx)),
                                  next,
                                  ib.select(is_last, next, v[2]),
                                  la,
                                  v[4],
                                  v[5],
                                  v[6]};
      });
  Value final_row = st[2];
  log_alpha = st[3];
  Value two_tl = b.mul(g.tl, b.constant_int(2, nt));
  Value l1 = pick_in_range(b, final_row, two_tl);
  Value l2 = pick_in_range(b, final_row, b.sub(two_tl, b.constant_int(1, nt)));
  TensorType vt(g.ct, {g.n});
  Value m = b.max(l1, l2);
  m = b.select(b.compare(m, b.constant(kNegInf, vt), CompareDirection::kEQ), b.constant(0, vt), m);
  Value ll = b.add(b.unary("stablehlo.log", b.add(b.unary("stablehlo.exponential", b.sub(l1, m)),
                                                  b.unary("stablehlo.exponential", b.sub(l2, m)))),
                   m);
  Value empty = b.compare(g.tl, b.constant_int(0, nt), CompareDirection::kEQ);
  // No input at all: likelihood 1 for an empty target, 0 otherwise (as the CPU kernel).
  Value no_input = b.compare(g.il, b.constant_int(0, nt), CompareDirection::kEQ);
  Value ll0 = b.select(empty, b.constant(0, vt), b.constant(kNegInf, vt));
  Value nll = b.neg(b.select(no_input, ll0, b.select(empty, l1, ll)));
  return {coerce(b, nll, ctx.out_type(0)), coerce(b, log_alpha, la_t)};
}

// _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
//                    log_alpha, blank, zero_infinity)
std::vector<Value> lower_ctc_loss_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value log_alpha = ctx.tensor(6);
  int64_t blank = ctx.int_arg(7);
  bool zero_inf = ctx.bool_arg(8);
  Ctc g = setup(ctx, 1, 2, 3, 4, log_alpha.shape()[2], blank);
  Value la = b.convert(log_alpha, g.ct);
  Value nll = b.convert(ctx.tensor(5), g.ct);
  Value gout = b.convert(ctx.tensor(0), g.ct);
  TensorType nl(g.ct, {g.n, g.l});
  TensorType pt(ElementType::kS64, {g.n, g.l});
  TensorType nt(ElementType::kS64, {g.n});
  Value ninf = b.constant(kNegInf, nl);
  Value s_idx = b.iota(pt, 1);
  Value two_tl = b.broadcast_in_dim(b.mul(g.tl, b.constant_int(2, nt)), pt.shape, {0});
  Value at_end = b.compare(s_idx, two_tl, CompareDirection::kEQ);
  Value before_end =
      b.binary("stablehlo.and",
               b.compare(s_idx, b.sub(two_tl, b.constant_int(1, pt)), CompareDirection::kEQ),
               b.compare(two_tl, b.constant_int(0, pt), CompareDirection::kGT));
  Value init_mask = b.binary("stablehlo.or", at_end, before_end);
  Value lt_end = b.compare(s_idx, two_tl, CompareDirection::kLT);
  // s < 2 tl - 1 and prime[s + 2] != prime[s]: skip shifted down by two.
  Value skip_up = b.binary(
      "stablehlo.and",
      b.compare(s_idx, b.sub(two_tl, b.constant_int(1, pt)), CompareDirection::kLT),
      b.slice(
          b.pad(g.skip, b.constant(0, TensorType(ElementType::kPred, {})), {0, 0}, {0, 2}, {0, 0}),
          {0, 2}, {g.n, g.l + 2}, {1, 1}));
  Value last_t = b.sub(g.il, b.constant_int(1, nt));
  // for t from T - 1 down to 0: beta = start at t == input_length - 1, -inf after it, else
  // step(beta); each row lands in lb (T, N, L). All the body reads is carried.
  std::vector<Value> st = b.while_loop(
      {b.constant_int(g.t - 1, kIdx), ninf, b.constant(kNegInf, TensorType(g.ct, {g.t, g.n, g.l})),
       g.lpp, init_mask, lt_end, skip_up, last_t},
      [&](FunctionBuilder& ib, const std::vector<Value>& v) {
        return std::vector<Value>{
            ib.compare(v[0], ib.constant_int(0, kIdx), CompareDirection::kGE)};
      },
      [&](FunctionBuilder& ib, const std::vector<Value>& v) {
        Value t = v[0], beta = v[1];
        Value ninf_i = ib.constant(kNegInf, nl);
        Value lpp = row_at(ib, g, v[3], t);
        Value lb2 = ib.select(v[5], shift(ib, beta, -1), ninf_i);
        Value lb3 = ib.select(v[6], shift(ib, beta, -2), ninf_i);
        Value step = log3(ib, beta, lb2, lb3, lpp);
        Value start = ib.select(v[4], lpp, ninf_i);
        Value tn = ib.broadcast_in_dim(t, nt.shape, {});
        Value is_last =
            ib.broadcast_in_dim(ib.compare(v[7], tn, CompareDirection::kEQ), nl.shape, {0});
        Value after =
            ib.broadcast_in_dim(ib.compare(v[7], tn, CompareDirection::kLT), nl.shape, {0});
        Value next = ib.select(is_last, start, ib.select(after, ninf_i, step));
        Value zero = ib.constant_int(0, kIdx);
        Value lb = ib.dynamic_update_slice(v[2], ib.reshape(next, {1, g.n, g.l}), {t, zero, zero});
        return std::vector<Value>{
            ib.sub(t, ib.constant_int(1, kIdx)), next, lb, v[3], v[4], v[5], v[6], v[7]};
      });
  Value lb = st[2];  // (T, N, L)
  std::vector<int64_t> tnl = {g.t, g.n, g.l};
  Value ab = b.add(b.transpose(la, {1, 0, 2}), lb);
  Value valid_s = b.broadcast_in_dim(b.compare(s_idx, two_tl, CompareDirection::kLE), tnl, {1, 2});
  TensorType t3(ElementType::kS64, tnl);
  Value valid_t =
      b.compare(b.iota(t3, 0), b.broadcast_in_dim(g.il, tnl, {1}), CompareDirection::kLT);
  ab = b.select(b.binary("stablehlo.and", valid_s, valid_t), ab, b.constant(kNegInf, ab.type));
  // Log-sum over the states of each character: (T, N, L, C).
  std::vector<int64_t> s4 = {g.t, g.n, g.l, g.c};
  Value hit = b.compare(b.broadcast_in_dim(g.prime, s4, {1, 2}),
                        b.iota(TensorType(ElementType::kS64, s4), 3), CompareDirection::kEQ);
  Value ab4 = b.select(hit, b.broadcast_in_dim(ab, s4, {0, 1, 2}),
                       b.constant(kNegInf, TensorType(g.ct, s4)));
  TensorType sc(g.ct, {});
  Value mx = b.reduce_simple(ab4, b.constant(kNegInf, sc), {2}, "stablehlo.maximum");  // (T, N, C)
  Value mx_safe = b.select(b.compare(mx, b.constant(kNegInf, mx.type), CompareDirection::kEQ),
                           b.constant(0, mx.type), mx);
  Value ex =
      b.unary("stablehlo.exponential", b.sub(ab4, b.broadcast_in_dim(mx_safe, s4, {0, 1, 3})));
  Value lab =
      b.add(b.unary("stablehlo.log", b.reduce_simple(ex, b.constant(0, sc), {2}, "stablehlo.add")),
            mx_safe);
  std::vector<int64_t> tnc = {g.t, g.n, g.c};
  Value nll3 = b.broadcast_in_dim(nll, tnc, {1});
  Value res = b.sub(b.unary("stablehlo.exponential", g.lp),
                    b.unary("stablehlo.exponential", b.sub(b.add(lab, nll3), g.lp)));
  res = b.mul(res, b.broadcast_in_dim(gout, tnc, {1}));
  Value keep = b.compare(b.iota(TensorType(ElementType::kS64, tnc), 0),
                         b.broadcast_in_dim(g.il, tnc, {1}), CompareDirection::kLT);
  if (zero_inf) {
    Value fin = b.compare(nll3, b.constant(std::numeric_limits<double>::infinity(), nll3.type),
                          CompareDirection::kNE);
    keep = b.binary("stablehlo.and", keep, fin);
  }
  res = b.select(keep, res, b.constant(0, res.type));
  return {coerce(b, res, ctx.out_type())};
}

TORCHTPU_LOWERING("aten::_ctc_loss", lower_ctc_loss);
TORCHTPU_LOWERING("aten::_ctc_loss.Tensor", lower_ctc_loss);
TORCHTPU_LOWERING("aten::_ctc_loss_backward", lower_ctc_loss_backward);
TORCHTPU_LOWERING("aten::_ctc_loss_backward.Tensor", lower_ctc_loss_backward);

}  // namespace
}  // namespace torchtpu::lowering
