// out= kernels that run a functional overload and write its results into the out tensors
// (out_via_functional.cpp says which ops need this and why).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstddef>

namespace torchtpu::aten {

// Calls `functional` with the out= call's inputs (its arguments before the out tensors), which
// must return one value per out tensor, writes the first `n_written` results into their out
// tensors, resized like the CPU's resize_output (an undefined result leaves its out tensor as it
// is, as does every result from `n_written` on), and leaves the out tensors as the call's returns.
void write_outs_via(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                    const c10::OperatorHandle& functional, size_t n_written);

}  // namespace torchtpu::aten
