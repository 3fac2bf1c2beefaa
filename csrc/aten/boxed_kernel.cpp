#include "aten/boxed_kernel.h"

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>

#include "aten/fallback_rng.h"
#include "config/config.h"
#include "exec/executor.h"
#include "exec/fused_eager.h"
#include "exec/host_transfer.h"
#include "exec/op_plan.h"
#include "runtime/metrics.h"
#include "runtime/trace.h"

namespace torchtpu::aten {
namespace {

using exec::full_name;
using exec::OpPlan;
using exec::plan_for;

// The device of the call's first tpu tensor (the current device when none).
int device_of(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
      return v.toTensor().device().index();
    }
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        if (t.defined() && t.is_privateuseone()) return t.device().index();
      }
    }
  }
  return -1;
}

// Read at every fallback (not cached): a test or a session may switch it at run time.
bool fallback_allowed() { return config::flag("TORCHTPU_CPU_FALLBACK", true); }

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason) {
  std::string name = full_name(op.schema().operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(fallback_allowed(), "torchtpu: ", name,
                              " is not supported natively on tpu (", reason,
                              ") and TORCHTPU_CPU_FALLBACK=0 forbids running it on the CPU");
  if (runtime::record_fallback(name)) {
    TORCH_WARN("torchtpu: ", name, " runs through the CPU fallback (", reason,
               "): its inputs travel to the host and back. Shown once per op; "
               "torchtpu.metrics()['cpu_fallbacks_by_op'] counts every call.");
  }
  // Fused eager: the op reads and writes its tensors on the host, after the device's pending
  // region ran (a cut in the op stream: every rank makes it at the same op).
  if (exec::fused::enabled())
    exec::fused::flush(device_of(op, *stack), exec::fused::Cause::kUnsupported);
  use_cpu_generators(op, stack);
  runtime::trace::Scope traced(runtime::trace::Kind::kFallback, "tpu::cpu_fallback", -1, 0, name);
  at::native::cpu_fallback(op, stack);
}

// Tensors that reach a kernel with the conjugate or negative bit (ops PyTorch lets through those
// keys, e.g. clone) are read by their logical values; mutated arguments are left as they are.
void resolve_math_bits(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t start = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[start + i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !(t.is_conj() || t.is_neg()) || !t.is_privateuseone()) continue;
    if (args[i].alias_info() && args[i].alias_info()->isWrite()) continue;
    v = resolve_bits(t);
  }
}

bool has_complex_operand(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  const size_t start = stack.size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[start + i];
    if (v.isTensor()) {
      if (v.toTensor().defined() && v.toTensor().is_complex()) return true;
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (t.defined() && t.is_complex()) return true;
      }
    } else if (v.isComplexDouble()) {
      return true;
    } else if (v.isInt() && args[i].name() == "dtype") {
      if (c10::isComplexType(static_cast<c10::ScalarType>(v.toInt()))) return true;
    }
  }
  return false;
}

}  // namespace

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  resolve_math_bits(op, stack);
  const OpPlan& plan = plan_for(op);
  if (!plan.lowering) return cpu_fallback(op, stack, "no lowering");
  // A complex operand of a lowering not declared kComplex (lowering/lowering.h) would lose its
  // imaginary part: the CPU runs it.
  if (!plan.descriptor->complex() && has_complex_operand(op, *stack)) {
    // torchtpu:: helpers (unique_count, ...) have no CPU kernel to fall back to.
    TORCH_CHECK_NOT_IMPLEMENTED(op.schema().name().rfind("torchtpu::", 0) != 0,
                                "torchtpu: ", op.schema().name(),
                                " does not support complex tensors on tpu");
    return cpu_fallback(op, stack, "no complex lowering");
  }
  try {
    if (auto reason = exec::run_native(plan, op, stack)) cpu_fallback(op, stack, *reason);
  } catch (const std::bad_alloc&) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "torchtpu: out of memory running ", plan.called_name);
  }
}

void run_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (auto reason = exec::run_native(plan_for(op), op, stack)) cpu_fallback(op, stack, *reason);
}

void run_lowered_by_name(const char* name, const char* overload, torch::jit::Stack* stack) {
  const c10::OperatorHandle& op = exec::op_handle(name, overload);
  TORCH_INTERNAL_ASSERT(plan_for(op).lowering, "torchtpu: ", name, ".", overload,
                        " has no lowering");
  run_lowered(op, stack);
}

}  // namespace torchtpu::aten
