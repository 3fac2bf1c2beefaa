// torch._scaled_mm: the float8 matrix product of FP8 recipes (torchao, Transformer Engine style
// linear layers). The operands stay float8 in the program: one dot_general with f8 operands and
// an f32 result, which XLA maps to the accelerator's fp8 matmul (Hopper's cuBLASLt fp8 GEMM, the
// TPU's MXU); the per-tensor or row-wise scales, the bias and the output scale are applied to the
// f32 product, as CUDA's kernel does in its epilogue. Products of two float8 values are exact in
// f32, so this differs from the CPU's emulation (scale each operand in f32, then an f32 matmul)
// only by f32 rounding. use_fast_accum is accepted and changes nothing: the sum is always f32.
// XLA:CPU compiles the same f8 dot (it widens the operands itself), so every platform gets one
// program.
#include <c10/util/Exception.h>

#include <optional>
#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

// A scale as an f32 factor of the (m, n) product: a single value everywhere, or one per row
// (`dim` 0, a (m, 1) scale) or per column (`dim` 1, a (1, n) scale).
Value scale_factor(FunctionBuilder& b, Value s, const std::vector<int64_t>& shape, int64_t dim) {
  s = b.convert(s, ElementType::kF32);
  if (s.type.numel() == 1) return b.broadcast_to(b.reshape(s, {}), shape);
  return b.broadcast_in_dim(b.reshape(s, {s.type.numel()}), shape, {dim});
}

// The scaled product shared by both schemas; `scale_result` may be null (absent).
Value scaled_product(LoweringContext& ctx, Value a, Value w, Value scale_a, Value scale_b,
                     const Value* bias, const Value* scale_result) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  TORCH_CHECK(a.rank() == 2 && w.rank() == 2, "_scaled_mm: mat_a and mat_b must be matrices");
  TORCH_CHECK(shlo::is_float8(a.dtype()) && shlo::is_float8(w.dtype()),
              "_scaled_mm: expected float8 matrices, got ",
              c10::toString(to_scalar_type(a.dtype())), " and ",
              c10::toString(to_scalar_type(w.dtype())));
  std::vector<int64_t> shape{a.shape()[0], w.shape()[1]};
  Value r = b.dot_general(a, w, {}, {}, {1}, {0}, TensorType(ElementType::kF32, shape));
  r = b.mul(r, scale_factor(b, scale_a, shape, 0));
  r = b.mul(r, scale_factor(b, scale_b, shape, 1));
  if (bias) r = b.add(r, scale_factor(b, *bias, shape, 1));
  // The CPU and CUDA divide by scale_result only for e4m3fn and e5m2 results (1/scale in f32).
  if (scale_result && (out.dtype == ElementType::kF8E4M3FN || out.dtype == ElementType::kF8E5M2)) {
    Value sr = b.reshape(b.convert(*scale_result, ElementType::kF32), {});
    Value inv = b.div(cst(b, 1.0, sr), sr);
    r = b.mul(r, b.broadcast_to(inv, shape));
  }
  return coerce(b, r, out);
}

// _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
std::vector<Value> lower_scaled_mm(LoweringContext& ctx) {
  std::optional<Value> bias, scale_result;
  if (!ctx.is_none(4)) bias = ctx.tensor(4);
  if (!ctx.is_none(5)) scale_result = ctx.tensor(5);
  return {scaled_product(ctx, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), ctx.tensor(3),
                         bias ? &*bias : nullptr, scale_result ? &*scale_result : nullptr)};
}

// _scaled_mm_v2(self, mat2, scale_a[], recipe_a, swizzle_a, scale_b[], recipe_b, swizzle_b, bias,
// out_dtype, contraction_dim, use_fast_accum), torch.nn.functional.scaled_mm's op: the
// tensor-wise and row-wise recipes (the eager kernel checks the recipes, as the CPU does).
std::vector<Value> lower_scaled_mm_v2(LoweringContext& ctx) {
  std::vector<Value> sa = ctx.tensor_list(2), sb = ctx.tensor_list(5);
  TORCH_CHECK(sa.size() == 1 && sb.size() == 1,
              "_scaled_mm_v2: expected one scale tensor per operand (tensor-wise or row-wise "
              "scaling) on tpu, got ",
              sa.size(), " and ", sb.size());
  std::vector<int64_t> contraction = ctx.int_list(10);
  const bool standard = contraction.empty() ||
                        (contraction.size() == 2 && contraction[0] == 1 && contraction[1] == 0);
  TORCH_CHECK(standard,
              "_scaled_mm_v2: only contraction_dim=[1, 0] (mat_a's columns with mat_b's rows) is "
              "supported on tpu");
  std::optional<Value> bias;
  if (!ctx.is_none(8)) bias = ctx.tensor(8);
  return {scaled_product(ctx, ctx.tensor(0), ctx.tensor(1), sa[0], sb[0], bias ? &*bias : nullptr,
                         nullptr)};
}

TORCHTPU_LOWERING("aten::_scaled_mm", lower_scaled_mm);
// The tpu kernel of aten::_scaled_mm runs this one (aten/scaled_mm.cpp says why).
TORCHTPU_LOWERING("torchtpu::scaled_mm", lower_scaled_mm);
TORCHTPU_LOWERING("aten::_scaled_mm_v2", lower_scaled_mm_v2);
TORCHTPU_LOWERING("torchtpu::scaled_mm_v2", lower_scaled_mm_v2);

}  // namespace
}  // namespace torchtpu::lowering
