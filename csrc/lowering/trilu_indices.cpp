// triu_indices.out / tril_indices.out (row, col, offset, *, out (2, N)) and, in compiled graphs,
// the functional triu_indices / tril_indices (row, col, offset, *, dtype, ...): the coordinates of
// a row x col matrix's upper / lower triangle in row-major order, computed on the device from
// iotas. The functional factories size `out` (aten/factories.cpp); row, col and offset are
// structural, so each triangle is its own small program and nothing is uploaded.
//
// Element k of the lower triangle lies in the last row whose start position is <= k. Row i holds
// clamp(i + offset + 1, 0, col) elements, so the starts have a closed form (an arithmetic series,
// then whole rows) that inverts with one square root, made exact by integer corrections. The
// upper triangle is the lower one turned half a turn: (r, c) -> (row-1-r, col-1-c) maps it onto
// the lower triangle at offset col - row - offset, and its k-th element onto that one's
// (N-1-k)-th.
#include <algorithm>

#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

struct Tril {
  FunctionBuilder& b;
  int64_t col, off;  // off clamped to [-row - 1, col]: beyond that the triangle does not change
  int64_t i0, i1;    // first row with elements, first full row
  int64_t first;     // elements in row i0
  int64_t series;    // elements in rows [i0, i1)

  Tril(FunctionBuilder& builder, int64_t row, int64_t c, int64_t offset)
      : b(builder), col(c), off(std::clamp(offset, -row - 1, c)) {
    i0 = std::max<int64_t>(0, -off);
    i1 = std::max(i0, col - off - 1);
    first = i0 + off + 1;
    series = (i1 - i0) * (i1 + i0 + 2 * off + 1) / 2;
  }
  Value k(int64_t v, const TensorType& t) { return b.constant_int(v, t); }
  // Elements in rows [0, r), for an int64 tensor of rows r: the rows [i0, min(r, i1)) hold
  // i + off + 1 each, the rows [i1, r) col each.
  Value start(Value r) {
    const TensorType& t = r.type;
    Value m = b.clamp(k(i0, t), r, k(i1, t));
    Value part = b.div(b.mul(b.sub(m, k(i0, t)), b.add(m, k(i0 + 2 * off + 1, t))), k(2, t));
    return b.add(part, b.mul(k(col, t), b.max(k(0, t), b.sub(r, k(i1, t)))));
  }
  // The row of each position (int64 tensor): in the series, u = r - i0 solves
  // u * (u + 2 * first - 1) / 2 <= pos, the root in f32 (no 64-bit floats, which TPUs emulate),
  // then corrected on the integers: f32 puts the root within +-1 of the true one for any
  // triangle below ~1e13 elements, and two rounds of +-1 make it exact; past it, whole rows.
  Value row_of(Value pos) {
    const TensorType& t = pos.type;
    TensorType f(ElementType::kF32, t.shape);
    auto fk = [&](double v) { return b.constant(v, f); };
    double a = 2.0 * static_cast<double>(first) - 1;
    Value disc = b.add(fk(a * a), b.mul(fk(8), b.convert(pos, ElementType::kF32)));
    Value u =
        b.unary("stablehlo.floor", b.div(b.sub(b.unary("stablehlo.sqrt", disc), fk(a)), fk(2)));
    Value r = b.add(b.convert(u, ElementType::kS64), k(i0, t));
    for (int i = 0; i < 2; ++i) {
      Value next = b.add(r, k(1, t));
      r = b.select(b.compare(start(next), pos, shlo::CompareDirection::kLE), next, r);
      r = b.select(b.compare(start(r), pos, shlo::CompareDirection::kGT), b.sub(r, k(1, t)), r);
    }
    Value rect = b.add(k(i1, t), b.div(b.sub(pos, k(series, t)), k(col, t)));
    return b.select(b.compare(pos, k(series, t), shlo::CompareDirection::kLT), r, rect);
  }
};

LoweringFn trilu_indices(bool upper) {
  return [upper](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    int64_t row = ctx.int_arg(0), col = ctx.int_arg(1), offset = ctx.int_arg(2);
    const TensorType& out = ctx.out_type();
    int64_t n = out.shape.at(1);
    if (n == 0) return {zeros(b, out)};
    // Clamped first (the upper triangle does not change beyond it), so this cannot overflow.
    int64_t off = upper ? col - row - std::clamp(offset, -row - 1, col + 1) : offset;
    Tril lower(b, row, col, off);
    TensorType n_t(ElementType::kS64, {1, n});
    Value pos = b.iota(n_t, 1);
    if (upper) pos = b.sub(lower.k(n - 1, n_t), pos);
    Value r = lower.row_of(pos);
    Value c = b.sub(pos, lower.start(r));
    if (upper) {
      r = b.sub(lower.k(row - 1, n_t), r);
      c = b.sub(lower.k(col - 1, n_t), c);
    }
    return {b.convert(b.concatenate({r, c}, 0), out.dtype)};
  };
}

TORCHTPU_LOWERING("aten::triu_indices.out", trilu_indices(true));
TORCHTPU_LOWERING("aten::tril_indices.out", trilu_indices(false));
// Compiled graphs carry the functional factories (with the result type from their fake
// tensors); eager calls reach the out= forms through the kernels in aten/factories.cpp.
TORCHTPU_GRAPH_LOWERING("aten::triu_indices", trilu_indices(true));
TORCHTPU_GRAPH_LOWERING("aten::tril_indices", trilu_indices(false));

}  // namespace
}  // namespace torchtpu::lowering
