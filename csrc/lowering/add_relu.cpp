// _add_relu (Tensor and Scalar overloads; the in-place and out= forms write their results): the
// fused add + relu that torch.jit's graph fuser and quantized models emit. The CPU computes
// self + alpha * other in the result dtype (int8 wraps), then clamps to [0, the dtype's largest
// finite value] (inf becomes 3.4e38 in float32; NaN stays NaN, as in its vectorized loop), and
// implements it for int8/16/32/64, float and double only: other dtypes raise its message.
#include <c10/core/ScalarType.h>

#include <limits>

#include "lowering/common.h"

namespace torchtpu::lowering {
namespace {

LoweringFn add_relu(const char* add_name) {
  return [add_name](LoweringContext& ctx) -> std::vector<Value> {
    ElementType t = ctx.out_type().dtype;
    c10::ScalarType st = to_scalar_type(t);
    bool supported = st == c10::kChar || st == c10::kShort || st == c10::kInt || st == c10::kLong ||
                     st == c10::kFloat || st == c10::kDouble;
    if (!supported) {
      // The CPU kernel's AT_DISPATCH names the C++ type.
      const char* cpp = st == c10::kByte            ? "unsigned char"
                        : st == c10::kBool          ? "bool"
                        : st == c10::kHalf          ? "c10::Half"
                        : st == c10::kBFloat16      ? "c10::BFloat16"
                        : st == c10::kComplexFloat  ? "c10::complex<float>"
                        : st == c10::kComplexDouble ? "c10::complex<double>"
                                                    : c10::toString(st);
      TORCH_CHECK(false, "Unsupported datatype for add_relu:", cpp);
    }
    const LoweringFn* add = find_lowering(add_name);
    TORCH_CHECK(add != nullptr, "torchtpu: _add_relu needs the ", add_name, " lowering");
    Value sum = (*add)(ctx).at(0);
    FunctionBuilder& b = ctx.b;
    Value zero = b.constant(0.0, sum.type);
    Value r = b.select(b.compare(sum, zero, shlo::CompareDirection::kLT), zero, sum);
    if (is_float(t)) {
      double top = t == ElementType::kF32 ? std::numeric_limits<float>::max()
                                          : std::numeric_limits<double>::max();
      Value hi = b.constant(top, sum.type);
      r = b.select(b.compare(r, hi, shlo::CompareDirection::kGT), hi, r);
    }
    return {r};
  };
}

}  // namespace

TORCHTPU_LOWERING("aten::_add_relu.Tensor", add_relu("aten::add.Tensor"));
TORCHTPU_LOWERING("aten::_add_relu.Scalar", add_relu("aten::add.Scalar"));

}  // namespace torchtpu::lowering
