// Eager execution of one aten op on tpu: signature -> program cache -> asynchronous launch.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "aten/op_plan.h"
#include "device/storage.h"

namespace torchtpu::aten {

// The PrivateUse1 boxed fallback: every op without an explicit tpu kernel arrives here and
// runs natively when the lowering table has it, else through the counted CPU fallback.
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs an op natively, through its lowering; `op` must have a plan with a lowering.
void run_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Convenience for kernels written in C++: calls `name` ("aten::copy_") on the stack natively.
void run_lowered_by_name(const char* name, const char* overload, torch::jit::Stack* stack);

// A new tpu tensor of `sizes` and `strides` (empty: contiguous) over a new storage owning
// `buffer`, whose dims are `buffer_dims`.
at::Tensor wrap_buffer(device::BufferPtr buffer, std::vector<int64_t> buffer_dims,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                       int device_index);
// A new contiguous tpu tensor of `sizes` owning `buffer`, whose dims are
// device::buffer_dims(sizes).
at::Tensor wrap_buffer(device::BufferPtr buffer, c10::IntArrayRef sizes, c10::ScalarType dtype,
                       int device_index);

// Gives every lowered op (and its in-place/out= forms) the tpu kernel directly.
void register_lowered_kernels();

// Number of entries in the in-memory program cache (for tests and metrics).
size_t program_cache_size();

}  // namespace torchtpu::aten
