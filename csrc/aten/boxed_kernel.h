// How an aten op reaches the engine from the dispatcher: the PrivateUse1 boxed kernel, and the
// counted CPU fallback for what the engine cannot run natively.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu::aten {

// The PrivateUse1 boxed fallback: every op without an explicit tpu kernel arrives here and
// runs natively when the lowering table has it, else through the counted CPU fallback.
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs an op natively, through its lowering (`op` must have one), or through the counted CPU
// fallback when the lowering declines the call.
void run_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Convenience for kernels written in C++: calls `name` ("aten::copy_") on the stack natively.
void run_lowered_by_name(const char* name, const char* overload, torch::jit::Stack* stack);

// The logical values of a tpu tensor with the conjugate and/or negative bit (lazy conj() and
// neg views) as a plain tensor: the bits are cleared on an alias and applied by a program.
at::Tensor resolve_bits(const at::Tensor& t);

// Gives every lowered op (and its in-place/out= forms) the tpu kernel directly.
void register_lowered_kernels();

}  // namespace torchtpu::aten
