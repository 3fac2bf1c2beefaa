// Integer gcd and lcm as ATen's CPU kernels (calc_gcd in ATen/native/Math.h, lcm_kernel in
// BinaryOpsKernel.cpp): Euclid on abs(a), abs(b) in the result dtype, so the CPU's wrap-arounds
// carry over (abs(INT_MIN) stays INT_MIN, gcd(int8 -128, 6) is -2), and
// lcm = g == 0 ? 0 : abs(a / g * b). Euclid runs as one elementwise stablehlo.while until every
// remainder is zero; an element whose remainder is already zero keeps its value.
#include <c10/util/Exception.h>

#include <string>

#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// Both operands broadcast to the result and in its dtype; integer dtypes only (the CPU kernels
// dispatch over AT_DISPATCH_INTEGRAL_TYPES, so bool and floats raise).
std::pair<Value, Value> int_operands(LoweringContext& ctx, const char* what) {
  const TensorType& out = ctx.out_type();
  TORCH_CHECK(shlo::is_integer(out.dtype) && out.dtype != ElementType::kPred, "\"", what,
              "\" not implemented for '", c10::toString(to_scalar_type(out.dtype)), "'");
  return {coerce(ctx.b, ctx.tensor(0), out), coerce(ctx.b, ctx.tensor(1), out)};
}

Value abs_int(FunctionBuilder& b, Value v) {
  return shlo::is_unsigned_int(v.dtype()) ? v : b.unary("stablehlo.abs", v);
}

Value any_nonzero(FunctionBuilder& b, Value v) {
  Value nz = b.compare(v, b.constant_int(0, v.type), CompareDirection::kNE);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < nz.rank(); ++d) dims.push_back(d);
  return b.reduce_simple(nz, b.constant(0, TensorType(ElementType::kPred, {})), dims,
                         "stablehlo.or");
}

// while (a != 0) { c = a; a = b % a; b = c; } return b;  with a = |x|, b = |y|.
Value gcd(FunctionBuilder& b, Value x, Value y) {
  std::vector<Value> st = b.while_loop(
      {abs_int(b, x), abs_int(b, y)},
      [](FunctionBuilder& ib, const std::vector<Value>& s) {
        return std::vector<Value>{any_nonzero(ib, s[0])};
      },
      [](FunctionBuilder& ib, const std::vector<Value>& s) {
        Value a = s[0], bb = s[1];
        Value active = ib.compare(a, ib.constant_int(0, a.type), CompareDirection::kNE);
        // XLA defines x % 0 (= x); the select keeps finished elements anyway.
        Value r = ib.binary("stablehlo.remainder", bb, a);
        return std::vector<Value>{ib.select(active, r, a), ib.select(active, a, bb)};
      });
  return st[1];
}

std::vector<Value> lower_gcd(LoweringContext& ctx) {
  auto [x, y] = int_operands(ctx, "gcd");
  return {gcd(ctx.b, x, y)};
}

std::vector<Value> lower_lcm(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  auto [x, y] = int_operands(ctx, "lcm");
  ElementType dt = x.dtype();
  Value g = gcd(b, x, y);
  // C++ promotes 8- and 16-bit operands to int before a / g * b and abs, and truncates only
  // the final result: abs(-200) is 200 -> int8 -56, where int8 arithmetic would give 56.
  ElementType ct = shlo::bit_width(dt) < 32 ? ElementType::kS32 : dt;
  Value xc = b.convert(x, ct), yc = b.convert(y, ct), gc = b.convert(g, ct);
  Value zero = b.constant_int(0, gc.type);
  Value g_zero = b.compare(gc, zero, CompareDirection::kEQ);
  Value g_safe = b.select(g_zero, b.constant_int(1, gc.type), gc);
  Value l = abs_int(b, b.mul(b.div(xc, g_safe), yc));
  return {b.convert(b.select(g_zero, zero, l), dt)};
}

TORCHTPU_LOWERING("aten::gcd", lower_gcd);
TORCHTPU_LOWERING("aten::lcm", lower_lcm);

}  // namespace
}  // namespace torchtpu::lowering
