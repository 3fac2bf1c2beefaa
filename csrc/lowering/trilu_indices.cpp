// triu_indices.out / tril_indices.out (row, col, offset, *, out (2, N)) and, in compiled graphs,
// the functional triu_indices / tril_indices (row, col, offset, *, dtype, ...): the coordinates of
// a row x col matrix's upper / lower triangle in row-major order, computed on the device from
// iotas. The functional factories size `out` (aten/factories.cpp); row, col and offset are
// structural, so each triangle is its own small program and nothing is uploaded.
//
// Element k of the N lies in row r = (last row whose first element's position <= k), found by
// binary search over the rows' start positions, which have a closed form: row i of the lower
// triangle holds clamp(i + offset + 1, 0, col) elements, row i of the upper one the rest of the
// row, col - clamp(i + offset, 0, col).
#include <algorithm>

#include "lowering/lowering.h"
#include "lowering/sorting.h"

namespace torchtpu::lowering {
namespace {

struct Tril {
  FunctionBuilder& b;
  int64_t col, off;  // off clamped to [-row - 1, col]: beyond that the triangle does not change
  int64_t i0, i1;    // first row with elements, first full row

  Tril(FunctionBuilder& builder, int64_t row, int64_t c, int64_t offset)
      : b(builder), col(c), off(std::clamp(offset, -row - 1, c)) {
    i0 = std::max<int64_t>(0, -off);
    i1 = std::max(i0, col - off - 1);
  }
  Value k(int64_t v, const TensorType& t) { return b.constant_int(v, t); }
  // Elements of the lower triangle in rows [0, r), for an int64 tensor of rows r: the rows
  // [i0, min(r, i1)) hold i + off + 1 each (an arithmetic series), the rows [i1, r) col each.
  Value start(Value r) {
    const TensorType& t = r.type;
    Value m = b.clamp(k(i0, t), r, k(i1, t));
    Value series = b.div(b.mul(b.sub(m, k(i0, t)), b.add(m, k(i0 + 2 * off + 1, t))), k(2, t));
    return b.add(series, b.mul(k(col, t), b.max(k(0, t), b.sub(r, k(i1, t)))));
  }
};

LoweringFn trilu_indices(bool upper) {
  return [upper](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    int64_t row = ctx.int_arg(0), col = ctx.int_arg(1), offset = ctx.int_arg(2);
    const TensorType& out = ctx.out_type();
    int64_t n = out.shape.at(1);
    if (n == 0) return {zeros(b, out)};
    // The upper triangle at offset is the complement of the lower one at offset - 1 (clamped
    // first, where the upper triangle does not change either, so that it cannot overflow).
    Tril lower(b, row, col, upper ? std::clamp(offset, -row - 1, col + 1) - 1 : offset);
    auto start = [&](Value r) {
      if (!upper) return lower.start(r);
      return b.sub(b.mul(r, lower.k(col, r.type)), lower.start(r));
    };
    TensorType rows_t(ElementType::kS64, {1, row});
    TensorType n_t(ElementType::kS64, {1, n});
    Value starts = start(b.iota(rows_t, 1));
    Value pos = b.iota(n_t, 1);
    Value r = b.sub(binary_search(b, starts, pos, /*right=*/true), lower.k(1, n_t));
    Value c = b.sub(pos, start(r));
    if (upper) {
      // A row of the upper triangle starts at column max(0, r + offset).
      Value first = b.add(r, lower.k(std::clamp(offset, -row, col), n_t));
      c = b.add(c, b.max(first, lower.k(0, n_t)));
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
