// torchtpu::stablehlo_call on tpu: the module's entry signature is its meta kernel (shapes and
// dtypes it returns, and a clear error for inputs it does not take); the tpu kernel is the
// generic lowered kernel (lowering/stablehlo_call.cpp), so each module and input signature
// compiles once and is cached like any op.
#include "lowering/stablehlo_call.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"
#include "lowering/lowering.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("stablehlo_call(Tensor[] args, str module) -> Tensor[]");
}

void check_inputs(const shlo::UserModule& module, at::TensorList args) {
  std::vector<shlo::TensorType> given;
  for (const at::Tensor& t : args) {
    TORCH_CHECK_VALUE(t.defined(), "torchtpu.stablehlo_op: an input is None");
    given.push_back(lowering::tensor_type(t.scalar_type(), t.sizes()));
  }
  TORCH_CHECK_VALUE(given == module.arg_types, "torchtpu.stablehlo_op: the module takes ",
                    lowering::describe_types(module.arg_types), " but was given ",
                    lowering::describe_types(given));
}

std::vector<at::Tensor> stablehlo_call_meta(at::TensorList args, c10::string_view text) {
  auto module = lowering::user_module(std::string(text));
  check_inputs(*module, args);
  std::vector<at::Tensor> out;
  for (const shlo::TensorType& t : module->result_types) {
    out.push_back(at::empty(
        t.shape, at::TensorOptions().dtype(lowering::to_scalar_type(t.dtype)).device(c10::kMeta)));
  }
  return out;
}

// The generic kernel returns the list (or, when the grouping is unknown, one tensor per result).
void stablehlo_call_tpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::IValue& args = (*stack)[stack->size() - 2];
  auto module = lowering::user_module(std::string(stack->back().toStringRef()));
  std::vector<at::Tensor> inputs = args.toTensorVector();
  check_inputs(*module, inputs);
  TORCH_CHECK_VALUE(!inputs.empty(), "torchtpu.stablehlo_op: the module must take at least one ",
                    "tensor, which says the device it runs on");
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK_VALUE(t.is_privateuseone() && t.device() == inputs.front().device(),
                      "torchtpu.stablehlo_op: every input must be on the same tpu device, got ",
                      t.device(), " and ", inputs.front().device());
  }
  const size_t base = stack->size() - 2;
  run_lowered(op, stack);
  if (stack->size() == base + 1 && stack->back().isTensorList()) return;  // already a list
  std::vector<at::Tensor> results;
  for (size_t i = base; i < stack->size(); ++i) results.push_back((*stack)[i].toTensor());
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  stack->emplace_back(std::move(results));
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) { m.impl("stablehlo_call", &stablehlo_call_meta); }

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("stablehlo_call", torch::CppFunction::makeFromBoxedFunction<&stablehlo_call_tpu>());
}

}  // namespace
}  // namespace torchtpu::aten
