// torch._assert_async(cond[, msg]): CUDA's device-side assert, here one of the device-side
// checks (lowering/checks.h): the next sync raises the message. PyTorch's decompositions emit
// it into compiled graphs (one_hot's class range), so those graphs check what the CPU checks.
#include <c10/util/Exception.h>

#include "lowering/checks.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

LoweringFn assert_async(bool with_message) {
  return [with_message](LoweringContext& ctx) -> std::vector<Value> {
    Value cond = ctx.tensor(0);
    TORCH_CHECK(cond.type.numel() == 1, "Expected Tensor with single element, but got tensor with ",
                cond.type.numel(), " elements");
    FunctionBuilder& b = ctx.b;
    Value v = b.reshape(cond, {});
    Value ok = cond.dtype() == ElementType::kPred
                   ? v
                   : b.compare(v, b.constant(0, v.type), shlo::CompareDirection::kNE);
    std::string message =
        with_message ? ctx.arg(1).ivalue.toStringRef()
                     : std::string("Expected Tensor with single nonzero value, but got zero");
    check(ctx, ok, message, /*index_error=*/false);
    return {};
  };
}

TORCHTPU_LOWERING("aten::_assert_async", assert_async(false));
TORCHTPU_LOWERING("aten::_assert_async.msg", assert_async(true));

}  // namespace
}  // namespace torchtpu::lowering
