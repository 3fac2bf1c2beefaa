// Random ops that run through the CPU fallback need a CPU generator: the CPU kernels refuse a
// tpu one ("Expected a 'cpu' generator device"). Each call gets a fresh CPU generator seeded
// from the tpu generator's (seed, offset), whose offset advances, so torch.tpu.manual_seed and
// torch.Generator("tpu") keep fallback ops reproducible and distinct from call to call.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu::aten {

// Replaces the op's `Generator?` arguments (a tpu generator, or None: the tpu default
// generator of the op's device) by CPU generators derived from them, in place on the stack.
void use_cpu_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torchtpu::aten
