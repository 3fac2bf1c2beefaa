// torchtpu::ragged_paged_attention (registered in aten/paged_attention.cpp): the attention of a
// mixed prefill/decode batch over a paged KV cache, in one lowering for eager ops and compiled
// graphs. A Pallas kernel would replace it on TPUs (through torchtpu.jax_op); this is the
// portable XLA form.
//
//   query [T, H, Dk], key [T, Hkv, Dk], value [T, Hkv, Dv]   T tokens of R requests, ragged:
//   query_start_loc [R+1]      request r owns tokens query_start_loc[r] .. [r+1] (non-decreasing;
//                              padding requests own none, padding tokens lie past [R])
//   seq_lens [R]               tokens of request r in the cache after this step
//   block_tables [R, MB]       request r's cache blocks, in order
//   slot_mapping [T]           cache slot (block * block_size + offset) each token's K|V goes
//                              to; negative: not written (padding)
//   kv_cache [NB, BS, Hkv, Dk+Dv]
//
// First the step's K|V are scattered into the cache (one scatter; negative slots fall outside
// the cache and XLA drops them). Then each token attends to positions 0..pos of its request
// (pos = seq_len - (query end - token)), within the sliding window if one is given, in chunks
// of whole blocks: a stablehlo.while whose trip count is the batch's longest context, so the
// work follows the actual context, not max_model_len, and no length is in the signature. Each
// chunk gathers the token's blocks through its request's block-table row and updates an online
// softmax (running max, sum, accumulator) in float32. GQA shares a kv head across its query
// heads in the dot products; soft-capping is cap * tanh(s / cap) on the scaled scores;
// attention sinks (one logit per head that takes probability mass but has no value) are the
// online softmax's starting state: max = sink, sum = 1.
#include <cmath>
#include <limits>

#include "lowering/checks.h"
#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// Context positions per loop iteration (rounded up to whole blocks): enough work per iteration
// to hide the loop's overhead, few enough wasted positions for short contexts.
constexpr int64_t kChunkTokens = 128;

constexpr ElementType kIdx = ElementType::kS64;

// operand[rows] for 1-D s64 `rows` of length n: rows of a 1-D or 2-D operand.
Value take_rows(FunctionBuilder& b, Value operand, Value rows) {
  const int64_t n = rows.shape()[0];
  std::vector<int64_t> slice{1}, shape{n};
  shlo::GatherDims dims{{}, {0}, {0}, 1};
  if (operand.rank() == 2) {
    slice.push_back(operand.shape()[1]);
    shape.push_back(operand.shape()[1]);
    dims.offset_dims = {1};
  }
  return b.gather(operand, b.reshape(rows, {n, 1}), dims, slice, operand.type.with_shape(shape));
}

Value scalar_idx(FunctionBuilder& b, int64_t v) { return b.constant_int(v, TensorType(kIdx, {})); }

// The loop state: iteration, running max and sum [T, Hkv, G], accumulator [T, Hkv, G, Dv], and
// the loop-invariant operands (passed through, so the body captures nothing from outside).
enum Carry { kIter, kMax, kSum, kAcc, kQuery, kCache, kBlocks, kPos, kCount };

struct Dims {
  int64_t t, hkv, g, dk, dv, nb, bs, w, bpc, chunk;
};

std::vector<Value> attend_chunk(FunctionBuilder& b, const std::vector<Value>& v, const Dims& d,
                                double scale, double soft_cap, int64_t window) {
  const ElementType f32 = ElementType::kF32;
  Value i = v[kIter];
  // The blocks this chunk reads, per token: [T, bpc], clamped into the cache (the block ids
  // themselves are checked once, outside the loop).
  Value start = b.mul(i, scalar_idx(b, d.bpc));
  Value blocks = shlo::dynamic_slice(b, v[kBlocks], {scalar_idx(b, 0), start}, {d.t, d.bpc});
  blocks = b.clamp(b.constant_int(0, blocks.type), blocks, b.constant_int(d.nb - 1, blocks.type));
  shlo::GatherDims gd{{2, 3, 4}, {0}, {0}, 2};
  Value rows = b.gather(v[kCache], b.reshape(blocks, {d.t, d.bpc, 1}), gd, {1, d.bs, d.hkv, d.w},
                        v[kCache].type.with_shape({d.t, d.bpc, d.bs, d.hkv, d.w}));
  rows = b.convert(b.reshape(rows, {d.t, d.chunk, d.hkv, d.w}), f32);
  Value k = b.slice(rows, {0, 0, 0, 0}, {d.t, d.chunk, d.hkv, d.dk}, {1, 1, 1, 1});
  Value val = b.slice(rows, {0, 0, 0, d.dk}, {d.t, d.chunk, d.hkv, d.w}, {1, 1, 1, 1});

  const std::vector<int64_t> sshape{d.t, d.hkv, d.g, d.chunk};
  // scores[t, h, g, s] = q[t, h, g, :] . k[t, s, h, :]
  Value s = b.dot_general(v[kQuery], k, {0, 1}, {0, 2}, {3}, {3}, TensorType(f32, sshape));
  s = b.mul(s, b.constant(scale, s.type));
  if (soft_cap > 0) {
    Value cap = b.constant(soft_cap, s.type);
    s = b.mul(cap, b.unary("stablehlo.tanh", b.div(s, cap)));
  }
  TensorType pos_type(kIdx, {d.t, d.chunk});
  Value key_pos = b.add(b.iota(pos_type, 1),
                        b.broadcast_in_dim(b.mul(i, scalar_idx(b, d.chunk)), pos_type.shape, {}));
  Value pos = b.broadcast_in_dim(v[kPos], pos_type.shape, {0});
  Value visible = b.compare(key_pos, pos, CompareDirection::kLE);
  if (window > 0) {
    Value first = b.sub(pos, b.constant_int(window, pos_type));
    visible = land(b, visible, b.compare(key_pos, first, CompareDirection::kGT));
  }
  const double inf = std::numeric_limits<double>::infinity();
  s = b.select(b.broadcast_in_dim(visible, sshape, {0, 3}), s, b.constant(-inf, s.type));

  Value m_old = v[kMax];
  Value m_new = b.max(m_old, b.reduce_simple(s, cst(b, -inf, f32), {3}, "stablehlo.maximum"));
  // Rows with nothing visible yet keep max -inf: shift by 0 there, so exp gives 0, not NaN.
  Value none = b.compare(m_new, b.constant(-inf, m_new.type), CompareDirection::kEQ);
  Value shift = b.select(none, b.constant(0, m_new.type), m_new);
  Value p =
      b.unary("stablehlo.exponential", b.sub(s, b.broadcast_in_dim(shift, sshape, {0, 1, 2})));
  Value alpha = b.unary("stablehlo.exponential", b.sub(m_old, shift));
  Value sum =
      b.add(b.mul(alpha, v[kSum]), b.reduce_simple(p, cst(b, 0, f32), {3}, "stablehlo.add"));
  const std::vector<int64_t> ashape{d.t, d.hkv, d.g, d.dv};
  Value pv = b.dot_general(p, val, {0, 1}, {0, 2}, {3}, {1}, TensorType(f32, ashape));
  Value acc = b.add(b.mul(b.broadcast_in_dim(alpha, ashape, {0, 1, 2}), v[kAcc]), pv);
  std::vector<Value> next = v;
  next[kIter] = b.add(i, scalar_idx(b, 1));
  next[kMax] = m_new;
  next[kSum] = sum;
  next[kAcc] = acc;
  return next;
}

std::vector<Value> lower_ragged_paged_attention(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const ElementType f32 = ElementType::kF32;
  Value query = ctx.tensor(0);
  Value cache = ctx.tensor(3);
  Value slots = b.convert(ctx.tensor(4), kIdx);
  Value tables = b.convert(ctx.tensor(5), kIdx);
  Value seq_lens = b.convert(ctx.tensor(6), kIdx);
  Value starts = b.convert(ctx.tensor(7), kIdx);
  const double scale = ctx.double_arg(8);
  const double soft_cap = ctx.double_arg(9);
  const int64_t window = ctx.int_arg(10);

  Dims d{};
  d.t = query.shape()[0];
  const int64_t heads = query.shape()[1];
  d.dk = query.shape()[2];
  d.nb = cache.shape()[0];
  d.bs = cache.shape()[1];
  d.hkv = cache.shape()[2];
  d.w = cache.shape()[3];
  d.dv = d.w - d.dk;
  d.g = heads / d.hkv;
  const int64_t reqs = tables.shape()[0], max_blocks = tables.shape()[1];
  const int64_t num_slots = d.nb * d.bs;

  // 1. The step's K|V into their slots.
  check_indices(ctx, slots, 0, num_slots,
                "torchtpu.ragged_paged_attention: slot {} is outside the KV cache", false, -1);
  check_indices(ctx, tables, 0, d.nb,
                "torchtpu.ragged_paged_attention: block {} is outside the KV cache", false);
  if (!ctx.is_none(1)) {
    Value kv = b.concatenate(
        {b.convert(ctx.tensor(1), cache.dtype()), b.convert(ctx.tensor(2), cache.dtype())}, 2);
    Value target = b.select(b.compare(slots, b.constant_int(0, slots.type), CompareDirection::kLT),
                            b.constant_int(num_slots, slots.type), slots);
    shlo::ScatterDims sd{{1, 2}, {0}, {0}, 1};
    Value flat = b.reshape(cache, {num_slots, d.hkv, d.w});
    flat = b.scatter(flat, b.reshape(target, {d.t, 1}), kv, sd, replace_region);
    cache = b.reshape(flat, cache.shape());
  }
  if (d.t == 0) {
    return {b.constant(0, ctx.out_type(0)), cache};
  }

  // 2. Each token's request (the number of request ends at or before it; R for padding tokens)
  // and position.
  TensorType tr(kIdx, {d.t, reqs});
  Value ends = b.slice(starts, {1}, {reqs + 1}, {1});
  Value token = b.iota(TensorType(kIdx, {d.t}), 0);
  Value past = b.compare(b.broadcast_in_dim(ends, tr.shape, {1}),
                         b.broadcast_in_dim(token, tr.shape, {0}), CompareDirection::kLE);
  Value req = b.reduce_simple(b.convert(past, kIdx), scalar_idx(b, 0), {1}, "stablehlo.add");
  Value real = b.compare(req, b.constant_int(reqs, req.type), CompareDirection::kLT);
  Value row = b.min(req, b.constant_int(reqs - 1, req.type));
  Value pos = b.sub(take_rows(b, seq_lens, row), b.sub(take_rows(b, ends, row), token));
  pos = b.select(real, pos, b.constant_int(-1, pos.type));

  // 3. Each token's block-table row, padded to whole chunks, and the loop over chunks.
  d.bpc = std::min(max_blocks, std::max<int64_t>(1, (kChunkTokens + d.bs - 1) / d.bs));
  d.chunk = d.bpc * d.bs;
  const int64_t chunks = (max_blocks + d.bpc - 1) / d.bpc;
  Value blocks = take_rows(b, tables, row);
  if (chunks * d.bpc > max_blocks) {
    blocks = b.pad(blocks, scalar_idx(b, 0), {0, 0}, {0, chunks * d.bpc - max_blocks}, {0, 0});
  }
  Value longest = b.reduce_simple(b.add(pos, b.constant_int(1, pos.type)), scalar_idx(b, 0), {0},
                                  "stablehlo.maximum");
  Value trips = b.div(b.add(longest, scalar_idx(b, d.chunk - 1)), scalar_idx(b, d.chunk));

  const std::vector<int64_t> mshape{d.t, d.hkv, d.g};
  const double inf = std::numeric_limits<double>::infinity();
  Value m0 = b.constant(-inf, TensorType(f32, mshape));
  Value l0 = b.constant(0, TensorType(f32, mshape));
  if (!ctx.is_none(11)) {
    Value sinks = b.reshape(b.convert(ctx.tensor(11), f32), {d.hkv, d.g});
    m0 = b.broadcast_in_dim(sinks, mshape, {1, 2});
    l0 = b.constant(1, TensorType(f32, mshape));
  }
  Value q = b.reshape(b.convert(query, f32), {d.t, d.hkv, d.g, d.dk});
  std::vector<Value> init(kCount);
  init[kIter] = scalar_idx(b, 0);
  init[kMax] = m0;
  init[kSum] = l0;
  init[kAcc] = b.constant(0, TensorType(f32, {d.t, d.hkv, d.g, d.dv}));
  init[kQuery] = q;
  init[kCache] = cache;
  init[kBlocks] = blocks;
  init[kPos] = pos;
  // The trip count rides in the loop state too (as the iteration's bound).
  init.push_back(trips);
  std::vector<Value> out = b.while_loop(
      init,
      [&](FunctionBuilder& ib, const std::vector<Value>& v) {
        return std::vector<Value>{ib.compare(v[kIter], v[kCount], CompareDirection::kLT)};
      },
      [&](FunctionBuilder& ib, const std::vector<Value>& v) {
        return attend_chunk(ib, v, d, scale, soft_cap, window);
      });
  Value sum = out[kSum];
  const std::vector<int64_t> ashape{d.t, d.hkv, d.g, d.dv};
  Value has = b.broadcast_in_dim(b.compare(sum, b.constant(0, sum.type), CompareDirection::kGT),
                                 ashape, {0, 1, 2});
  Value safe = b.select(b.compare(sum, b.constant(0, sum.type), CompareDirection::kGT), sum,
                        b.constant(1, sum.type));
  Value result = b.div(out[kAcc], b.broadcast_in_dim(safe, ashape, {0, 1, 2}));
  result = b.select(has, result, b.constant(0, result.type));
  result = b.reshape(result, {d.t, heads, d.dv});
  return {coerce(b, result, ctx.out_type(0)), cache};
}

}  // namespace

TORCHTPU_LOWERING("torchtpu::ragged_paged_attention", lower_ragged_paged_attention);

}  // namespace torchtpu::lowering
