// Matrix products on stablehlo.dot_general. bf16/f16 products ask for an f32 result (the
// preferred element type) and round once, as CPU's BLAS paths accumulate in f32; integer
// products stay in their own type so they are exact (and wrap like CPU on overflow).
#include <ATen/ops/_linalg_check_errors.h>

#include "lowering/common.h"
#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

struct DotSpec {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};

Value dot(FunctionBuilder& b, Value lhs, Value rhs, const DotSpec& s, const TensorType& t) {
  return b.dot_general(lhs, rhs, s.lhs_batch, s.rhs_batch, s.lhs_contract, s.rhs_contract, t);
}

// A complex product as four real ones, re = re.re - im.im and im = re.im + im.re: the sum of the
// textbook products (a + bi)(c + di) = (ac - bd) + (ad + bc)i over k, which the CPU's bmm, dot and
// matmul loops compute, with the same infinities and NaNs (a sum holds NaN exactly when a term
// does or both infinities appear, however it is grouped). XLA's own complex dot is another
// algorithm per platform: on XLA:CPU a row holding inf gave nan+nanj where the CPU gives
// inf+nanj ([[inf, 1+1j]] x [[1], [1]], issue 32).
Value complex_product(FunctionBuilder& b, Value lhs, Value rhs, const DotSpec& s,
                      const TensorType& out) {
  TensorType part(shlo::complex_component(out.dtype), out.shape);
  Value lr = ew::real_part(b, lhs), li = ew::imag_part(b, lhs);
  Value rr = ew::real_part(b, rhs), ri = ew::imag_part(b, rhs);
  Value re = b.sub(dot(b, lr, rr, s, part), dot(b, li, ri, s, part));
  Value im = b.add(dot(b, lr, ri, s, part), dot(b, li, rr, s, part));
  return ew::make_complex(b, re, im, out.dtype);
}

// lhs x rhs in the accumulation type of the result, with the result's shape.
Value product(LoweringContext& ctx, Value lhs, Value rhs, const DotSpec& s) {
  const TensorType& out = ctx.out_type();
  ElementType acc = opmath_type(out.dtype);
  // float8 operands widen exactly: the CPU's float8 matmul accumulates in float32 and rounds once
  // (torch._scaled_mm, lowering/scaled_mm.cpp, is where an f8 dot goes to the hardware).
  ElementType in = shlo::is_float8(out.dtype) ? acc : out.dtype;
  lhs = ctx.b.convert(lhs, in);
  rhs = ctx.b.convert(rhs, in);
  if (shlo::is_complex(out.dtype)) return complex_product(ctx.b, lhs, rhs, s, out);
  return dot(ctx.b, lhs, rhs, s, TensorType(acc, out.shape));
}

const DotSpec kMM{{}, {}, {1}, {0}};
const DotSpec kBMM{{0}, {0}, {2}, {1}};
const DotSpec kDot{{}, {}, {0}, {0}};
const DotSpec kMV{{}, {}, {1}, {0}};
// addbmm sums the batch of products: contracting the batch dim along with k does exactly that.
const DotSpec kAddBMM{{}, {}, {0, 2}, {0, 1}};

LoweringFn plain(DotSpec spec) {
  return [spec](LoweringContext& ctx) -> std::vector<Value> {
    Value p = product(ctx, ctx.tensor(0), ctx.tensor(1), spec);
    return {ctx.b.convert(p, ctx.out_type().dtype)};
  };
}

// beta * self + alpha * (a x b); beta and alpha are runtime Scalars. As documented for addmm,
// beta == 0 ignores self entirely, so NaN/inf there do not propagate.
LoweringFn with_bias(DotSpec spec) {
  return [spec](LoweringContext& ctx) -> std::vector<Value> {
    FunctionBuilder& b = ctx.b;
    const TensorType& out = ctx.out_type();
    Value p = product(ctx, ctx.tensor(1), ctx.tensor(2), spec);
    TensorType acc_t = p.type;
    Value self = coerce(b, ctx.tensor(0), acc_t);
    Value beta = coerce(b, ctx.tensor(ctx.index_of("beta")), acc_t);
    Value alpha = coerce(b, ctx.tensor(ctx.index_of("alpha")), acc_t);
    Value zero = b.constant(0, acc_t);
    Value bias = b.select(b.compare(beta, zero, CompareDirection::kEQ), zero, b.mul(beta, self));
    Value r = b.add(bias, b.mul(alpha, p));
    return {b.convert(r, out.dtype)};
  };
}

// beta * self + alpha * outer(vec1, vec2) as one expression: half types compute in f32 and
// round once (ATen's composite would round the outer product, both scalings and the sum to half
// separately). bool follows ATen: (beta && self) || (alpha && vec1 && vec2).
std::vector<Value> lower_addr(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  const int64_t n = out.shape[0], m = out.shape[1];
  TensorType acc_t(out.dtype == ElementType::kPred ? ElementType::kPred : opmath_type(out.dtype),
                   out.shape);
  Value v1 = b.broadcast_to(
      b.reshape(coerce(b, ctx.tensor(1), TensorType(acc_t.dtype, {n})), {n, 1}), {n, m});
  Value v2 = b.broadcast_to(
      b.reshape(coerce(b, ctx.tensor(2), TensorType(acc_t.dtype, {m})), {1, m}), {n, m});
  Value self = coerce(b, ctx.tensor(0), acc_t);
  Value beta = coerce(b, ctx.tensor(ctx.index_of("beta")), acc_t);
  Value alpha = coerce(b, ctx.tensor(ctx.index_of("alpha")), acc_t);
  if (acc_t.dtype == ElementType::kPred) {
    Value lhs = b.binary("stablehlo.and", beta, self);
    Value rhs = b.binary("stablehlo.and", alpha, b.binary("stablehlo.and", v1, v2));
    return {b.binary("stablehlo.or", lhs, rhs)};
  }
  Value zero = b.constant(0, acc_t);
  Value bias = b.select(b.compare(beta, zero, CompareDirection::kEQ), zero, b.mul(beta, self));
  return {b.convert(b.add(bias, b.mul(alpha, b.mul(v1, v2))), out.dtype)};
}

TORCHTPU_LOWERING("aten::addr", lower_addr, kComplex);
TORCHTPU_LOWERING("aten::mm", plain(kMM), kComplex);
TORCHTPU_LOWERING("aten::bmm", plain(kBMM), kComplex);
TORCHTPU_LOWERING("aten::dot", plain(kDot), kComplex);
TORCHTPU_LOWERING("aten::mv", plain(kMV), kComplex);
TORCHTPU_LOWERING("aten::addmm", with_bias(kMM), kComplex);
TORCHTPU_LOWERING("aten::baddbmm", with_bias(kBMM), kComplex);
TORCHTPU_LOWERING("aten::addbmm", with_bias(kAddBMM), kComplex);
TORCHTPU_LOWERING("aten::addmv", with_bias(kMV), kComplex);

}  // namespace
}  // namespace torchtpu::lowering
