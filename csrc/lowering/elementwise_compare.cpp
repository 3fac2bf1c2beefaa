// Comparisons, logical and bitwise ops, shifts, where/masked_fill and clamp.
// Comparisons run in the promoted dtype of their operands (not opmath): PyTorch rounds a
// Python scalar to a half tensor's dtype before comparing, so `x == 0.1` holds for f16 x = 0.1.
#include <ATen/core/function_schema.h>
#include <c10/util/Exception.h>

#include <functional>
#include <string>

#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"
#include "lowering/scalar_fits.h"

namespace torchtpu::lowering {
namespace {

using namespace ew;

using shlo::CompareDirection;

LoweringFn comparison(CompareDirection dir) {
  return [dir](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = to_element_type(ctx.promoted_type({0, 1}));
    return {finish(ctx, ctx.b.compare(operand(ctx, 0, ct), operand(ctx, 1, ct), dir))};
  };
}

LoweringFn logical(const char* stablehlo_op) {
  return [stablehlo_op](LoweringContext& ctx) -> std::vector<Value> {
    auto pred = [&](size_t i) {
      return coerce(ctx.b, truth(ctx.b, ctx.tensor(i)),
                    ctx.out_type().with_dtype(ElementType::kPred));
    };
    Value p = pred(0), q = pred(1);
    return {finish(ctx, ctx.b.binary(stablehlo_op, p, q))};
  };
}

// and/or/xor in the result dtype (integers or bool).
LoweringFn bitwise(const char* stablehlo_op) {
  return [stablehlo_op](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = ctx.out_type().dtype;
    TORCH_CHECK(!is_fp(ct), "torchtpu lowering: ", ctx.schema().name(),
                " needs integer or bool operands");
    return {ctx.b.binary(stablehlo_op, operand(ctx, 0, ct), operand(ctx, 1, ct))};
  };
}

// StableHLO shifts treat the amount as unsigned, so a negative or too large amount gives 0
// (left) or the sign fill (right), which is what PyTorch's shift kernels do.
LoweringFn shift(bool left) {
  return [left](LoweringContext& ctx) -> std::vector<Value> {
    ElementType ct = ctx.out_type().dtype;
    TORCH_CHECK(shlo::is_integer(ct), "torchtpu lowering: ", ctx.schema().name(),
                " needs integer operands");
    const char* op = left                      ? "stablehlo.shift_left"
                     : shlo::is_signed_int(ct) ? "stablehlo.shift_right_arithmetic"
                                               : "stablehlo.shift_right_logical";
    return {ctx.b.binary(op, operand(ctx, 0, ct), operand(ctx, 1, ct))};
  };
}

std::vector<Value> lower_where(LoweringContext& ctx) {
  ElementType ct = ctx.out_type().dtype;
  Value cond = operand(ctx, 0, ElementType::kPred);
  return {ctx.b.select(cond, operand(ctx, 1, ct), operand(ctx, 2, ct))};
}

std::vector<Value> lower_masked_fill(LoweringContext& ctx) {
  ElementType ct = ctx.out_type().dtype;
  check_scalar_arg_fits(ctx.arg(2), ct);
  Value mask = operand(ctx, 1, ElementType::kPred);
  return {ctx.b.select(mask, operand(ctx, 2, ct), operand(ctx, 0, ct))};
}

// min(max(x, lo), hi): NaN in x or a bound propagates, and lo > hi gives hi, as in PyTorch.
// Bool clamps run in i8 so maximum/minimum act as or/and.
std::vector<Value> clamp_impl(LoweringContext& ctx, std::optional<size_t> lo,
                              std::optional<size_t> hi) {
  ElementType out = ctx.out_type().dtype;
  ElementType ct = out == ElementType::kPred ? ElementType::kS8 : out;
  Value r = operand(ctx, 0, ct);
  if (lo && !ctx.is_none(*lo)) r = max_nan(ctx.b, r, operand(ctx, *lo, ct));
  if (hi && !ctx.is_none(*hi)) r = min_nan(ctx.b, r, operand(ctx, *hi, ct));
  return {finish(ctx, r)};
}

std::vector<Value> lower_clamp(LoweringContext& ctx) {
  return clamp_impl(ctx, ctx.index_of("min"), ctx.index_of("max"));
}

std::vector<Value> lower_clamp_min(LoweringContext& ctx) {
  return clamp_impl(ctx, ctx.index_of("min"), std::nullopt);
}

std::vector<Value> lower_clamp_max(LoweringContext& ctx) {
  return clamp_impl(ctx, std::nullopt, ctx.index_of("max"));
}

TORCHTPU_LOWERING("aten::eq.Tensor", comparison(CompareDirection::kEQ), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::eq.Scalar", comparison(CompareDirection::kEQ), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::ne.Tensor", comparison(CompareDirection::kNE), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::ne.Scalar", comparison(CompareDirection::kNE), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::lt.Tensor", comparison(CompareDirection::kLT), kElementwise);
TORCHTPU_LOWERING("aten::lt.Scalar", comparison(CompareDirection::kLT), kElementwise);
TORCHTPU_LOWERING("aten::le.Tensor", comparison(CompareDirection::kLE), kElementwise);
TORCHTPU_LOWERING("aten::le.Scalar", comparison(CompareDirection::kLE), kElementwise);
TORCHTPU_LOWERING("aten::gt.Tensor", comparison(CompareDirection::kGT), kElementwise);
TORCHTPU_LOWERING("aten::gt.Scalar", comparison(CompareDirection::kGT), kElementwise);
TORCHTPU_LOWERING("aten::ge.Tensor", comparison(CompareDirection::kGE), kElementwise);
TORCHTPU_LOWERING("aten::ge.Scalar", comparison(CompareDirection::kGE), kElementwise);

TORCHTPU_LOWERING("aten::logical_and", logical("stablehlo.and"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::logical_or", logical("stablehlo.or"), kComplex | kElementwise);
TORCHTPU_LOWERING("aten::logical_xor", logical("stablehlo.xor"), kComplex | kElementwise);

TORCHTPU_LOWERING("aten::bitwise_and.Tensor", bitwise("stablehlo.and"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_and.Scalar", bitwise("stablehlo.and"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_and.Scalar_Tensor", bitwise("stablehlo.and"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_or.Tensor", bitwise("stablehlo.or"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_or.Scalar", bitwise("stablehlo.or"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_or.Scalar_Tensor", bitwise("stablehlo.or"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_xor.Tensor", bitwise("stablehlo.xor"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_xor.Scalar", bitwise("stablehlo.xor"), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_xor.Scalar_Tensor", bitwise("stablehlo.xor"), kElementwise);

TORCHTPU_LOWERING("aten::bitwise_left_shift.Tensor", shift(true), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_left_shift.Tensor_Scalar", shift(true), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_left_shift.Scalar_Tensor", shift(true), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_right_shift.Tensor", shift(false), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_right_shift.Tensor_Scalar", shift(false), kElementwise);
TORCHTPU_LOWERING("aten::bitwise_right_shift.Scalar_Tensor", shift(false), kElementwise);
TORCHTPU_LOWERING("aten::__lshift__.Tensor", shift(true), kElementwise);
TORCHTPU_LOWERING("aten::__lshift__.Scalar", shift(true), kElementwise);
TORCHTPU_LOWERING("aten::__rshift__.Tensor", shift(false), kElementwise);
TORCHTPU_LOWERING("aten::__rshift__.Scalar", shift(false), kElementwise);

TORCHTPU_LOWERING("aten::where.self", lower_where, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::where.ScalarSelf", lower_where, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::where.ScalarOther", lower_where, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::where.Scalar", lower_where, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::masked_fill.Scalar", lower_masked_fill, kComplex | kElementwise);
TORCHTPU_LOWERING("aten::masked_fill.Tensor", lower_masked_fill, kComplex | kElementwise);

TORCHTPU_LOWERING("aten::clamp", lower_clamp, kElementwise);
TORCHTPU_LOWERING("aten::clamp.Tensor", lower_clamp, kElementwise);
TORCHTPU_LOWERING("aten::clamp_min", lower_clamp_min, kElementwise);
TORCHTPU_LOWERING("aten::clamp_min.Tensor", lower_clamp_min, kElementwise);
TORCHTPU_LOWERING("aten::clamp_max", lower_clamp_max, kElementwise);
TORCHTPU_LOWERING("aten::clamp_max.Tensor", lower_clamp_max, kElementwise);

}  // namespace
}  // namespace torchtpu::lowering
