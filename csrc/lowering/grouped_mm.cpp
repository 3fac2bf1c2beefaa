// _grouped_mm (torch.nn.functional.grouped_mm): the jagged matrix products of Mixture-of-Experts
// layers. Transformers routes MoE experts through it on the "tpu" device type. A 2-D operand is
// cut into groups along its jagged dim by `offs` (each group's end, a runtime tensor, so new
// routings compile nothing). On TPU the groups map to XLA's ragged dot (chlo.ragged_dot), which
// the TPU compiler runs natively; XLA:CPU cannot emit ragged-dot ("not supported by XLA:CPU
// ThunkEmitter"), so other platforms compute every group's product and keep each row's own
// (G times the FLOPs of one product: correct everywhere, fast only on TPU). Rows or columns past
// the last offset come out zero. Products accumulate in f32 for half inputs.
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

std::string dims(const char* name, const std::vector<int64_t>& d) {
  std::string s = std::string(name) + " = [";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Group sizes (differences of consecutive offsets) as i64.
Value group_sizes(FunctionBuilder& b, Value offs) {
  TORCH_CHECK(offs.rank() == 1, "grouped_mm: offs must be 1-D, got ", offs.rank(), " dims");
  int64_t g = offs.shape()[0];
  Value ends = b.convert(offs, ElementType::kS64);
  if (g == 1) return ends;
  Value zero = b.constant_int(0, TensorType(ElementType::kS64, {1}));
  Value starts = b.concatenate({zero, b.slice(ends, {0}, {g - 1}, {1})}, 0);
  return b.sub(ends, starts);
}

bool platform_has_ragged_dot(const LoweringContext& ctx) { return ctx.platform() == "tpu"; }

// Group of each index along a jagged dim of length `n`: how many group ends are <= the index
// (G for indices past the last offset, which then match no group).
Value group_of_index(FunctionBuilder& b, Value offs, int64_t n) {
  int64_t g = offs.shape()[0];
  TensorType grid(ElementType::kS64, {n, g});
  Value index = b.iota(grid, 0);
  Value ends = b.broadcast_in_dim(b.convert(offs, ElementType::kS64), {n, g}, {1});
  Value passed = b.convert(b.compare(ends, index, shlo::CompareDirection::kLE), ElementType::kS64);
  return b.reduce_simple(passed, b.constant_int(0, TensorType(ElementType::kS64, {})), {1},
                         "stablehlo.add");
}

// (n, G) mask in `dtype`: 1 where index i belongs to group g.
Value group_mask(FunctionBuilder& b, Value offs, int64_t n, ElementType dtype) {
  int64_t g = offs.shape()[0];
  Value gid = b.broadcast_in_dim(group_of_index(b, offs, n), {n, g}, {0});
  Value each = b.iota(TensorType(ElementType::kS64, {n, g}), 1);
  return b.convert(b.compare(gid, each, shlo::CompareDirection::kEQ), dtype);
}

// The dense equivalents of ragged_dot below, for platforms without it.
Value dense_rows_grouped(FunctionBuilder& b, Value a, Value w, Value offs) {
  // full[m, g, n] = a[m] @ w[g]; keep g == group of m.
  int64_t m = a.shape()[0], g = w.shape()[0], n = w.shape()[2];
  Value full = b.dot_general(a, w, {}, {}, {1}, {1}, TensorType(a.dtype(), {m, g, n}));
  Value mask = b.broadcast_in_dim(group_mask(b, offs, m, a.dtype()), {m, g, n}, {0, 1});
  return b.reduce_simple(b.mul(full, mask), b.constant(0, TensorType(a.dtype(), {})), {1},
                         "stablehlo.add");
}

Value dense_contraction_grouped(FunctionBuilder& b, Value a, Value w, Value offs) {
  // out[g] = (a masked to group g's columns) @ w.
  int64_t m = a.shape()[0], k = a.shape()[1], g = offs.shape()[0], n = w.shape()[1];
  Value mask = b.transpose(group_mask(b, offs, k, a.dtype()), {1, 0});  // (g, k)
  Value masked =
      b.mul(b.broadcast_in_dim(a, {g, m, k}, {1, 2}), b.broadcast_in_dim(mask, {g, m, k}, {0, 2}));
  return b.dot_general(masked, w, {}, {}, {2}, {0}, TensorType(a.dtype(), {g, m, n}));
}

Value dense_columns_grouped(FunctionBuilder& b, Value a, Value w, Value offs) {
  // full[g, m, c] = a[g] @ w[:, c]; keep g == group of column c.
  int64_t g = a.shape()[0], m = a.shape()[1], n = w.shape()[1];
  Value full = b.dot_general(a, w, {}, {}, {2}, {0}, TensorType(a.dtype(), {g, m, n}));
  Value mask = b.broadcast_in_dim(group_mask(b, offs, n, a.dtype()), {g, m, n}, {2, 0});
  return b.reduce_simple(b.mul(full, mask), b.constant(0, TensorType(a.dtype(), {})), {0},
                         "stablehlo.add");
}

// lhs [m, k] with rows grouped (mode "ragged non-contracting"), rhs [g, k, n] -> [m, n];
// or lhs [m, k] with the contracted dim grouped, rhs [k, n] -> [g, m, n].
Value ragged_dot(FunctionBuilder& b, Value lhs, Value rhs, Value sizes, bool ragged_contracting,
                 const TensorType& result) {
  std::string dn =
      "precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>], "
      "ragged_dot_dimension_numbers = #chlo.ragged_dot<" +
      dims("lhs_batching_dimensions", {}) + ", " + dims("rhs_batching_dimensions", {}) + ", " +
      dims("lhs_contracting_dimensions", {1}) + ", " +
      dims("rhs_contracting_dimensions", {ragged_contracting ? 0 : 1}) + ", " +
      dims("lhs_ragged_dimensions", {ragged_contracting ? 1 : 0}) + ", " +
      dims("rhs_group_dimensions",
           ragged_contracting ? std::vector<int64_t>{} : std::vector<int64_t>{0}) +
      ">";
  return b.op("chlo.ragged_dot", {lhs, rhs, sizes}, result, dn);
}

// _grouped_mm(self, mat2, offs, bias, out_dtype)
std::vector<Value> lower_grouped_mm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value a = ctx.tensor(0);
  Value w = ctx.tensor(1);
  bool has_offs = !ctx.is_none(2);
  TORCH_CHECK(a.rank() == 2 || a.rank() == 3, "grouped_mm: mat_a must be 2-D or 3-D");
  TORCH_CHECK(w.rank() == 2 || w.rank() == 3, "grouped_mm: mat_b must be 2-D or 3-D");
  TORCH_CHECK((a.rank() == 3 && w.rank() == 3) == !has_offs,
              "grouped_mm: offs must be given exactly when an operand is 2-D");
  ElementType acc = opmath_type(out.dtype);
  a = b.convert(a, acc);
  w = b.convert(w, acc);
  Value r;
  if (!has_offs) {
    // [g, m, k] x [g, k, n]: a batched product.
    std::vector<int64_t> shape{a.shape()[0], a.shape()[1], w.shape()[2]};
    r = b.dot_general(a, w, {0}, {0}, {2}, {1}, TensorType(acc, shape));
  } else if (!platform_has_ragged_dot(ctx)) {
    Value offs = ctx.tensor(2);
    TORCH_CHECK(offs.rank() == 1, "grouped_mm: offs must be 1-D, got ", offs.rank(), " dims");
    if (a.rank() == 2 && w.rank() == 3) {
      r = dense_rows_grouped(b, a, w, offs);
    } else if (a.rank() == 2) {
      r = dense_contraction_grouped(b, a, w, offs);
    } else {
      r = dense_columns_grouped(b, a, w, offs);
    }
  } else {
    Value sizes = group_sizes(b, ctx.tensor(2));
    if (a.rank() == 2 && w.rank() == 3) {
      // Rows of a grouped; group i multiplies w[i].
      r = ragged_dot(b, a, w, sizes, false, TensorType(acc, {a.shape()[0], w.shape()[2]}));
    } else if (a.rank() == 2 && w.rank() == 2) {
      // The shared dim grouped (weight gradients): out[i] = a[:, group i] @ w[group i, :].
      r = ragged_dot(b, a, w, sizes, true,
                     TensorType(acc, {sizes.shape()[0], a.shape()[0], w.shape()[1]}));
    } else {
      // a [g, m, k], w [k, n] with the columns of w grouped: out^T = w^T (rows grouped) times
      // a[i]^T, the first case on transposed operands.
      Value wt = b.transpose(w, {1, 0});
      Value at = b.transpose(a, {0, 2, 1});
      Value rt = ragged_dot(b, wt, at, sizes, false, TensorType(acc, {w.shape()[1], a.shape()[1]}));
      r = b.transpose(rt, {1, 0});
    }
  }
  if (!ctx.is_none(3)) r = b.add(r, b.broadcast_to(b.convert(ctx.tensor(3), acc), r.shape()));
  return {coerce(b, r, out)};
}

TORCHTPU_LOWERING("aten::_grouped_mm", lower_grouped_mm);
// The tpu kernel of aten::_grouped_mm runs this one (aten/grouped_mm.cpp says why).
TORCHTPU_LOWERING("torchtpu::grouped_mm", lower_grouped_mm);

}  // namespace
}  // namespace torchtpu::lowering
