// Eager execution of one aten op on tpu: signature -> program cache -> asynchronous launch.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>

#include "device/storage.h"
#include "exec/op_plan.h"

namespace torchtpu::exec {

// Runs `op` (whose `plan` has a lowering) natively on the stack: signature -> program cache ->
// asynchronous launch. Returns why it cannot when this call must run elsewhere (no meta kernel,
// or the lowering declined the signature): the caller (aten/boxed_kernel.cpp) then runs the
// counted CPU fallback, which is a registration concern, not the engine's.
[[nodiscard]] std::optional<std::string> run_native(const OpPlan& plan,
                                                    const c10::OperatorHandle& op,
                                                    torch::jit::Stack* stack);

// The dispatcher's handle of `name` ("aten::copy_") and `overload`, looked up once.
const c10::OperatorHandle& op_handle(const char* name, const char* overload);

// A new tpu tensor of `sizes` and `strides` (empty: contiguous) over a new storage owning
// `buffer`, whose dims are `buffer_dims`.
at::Tensor wrap_buffer(device::BufferPtr buffer, std::vector<int64_t> buffer_dims,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                       int device_index);
// A new contiguous tpu tensor of `sizes` owning `buffer`, whose dims are
// device::buffer_dims(sizes).
at::Tensor wrap_buffer(device::BufferPtr buffer, c10::IntArrayRef sizes, c10::ScalarType dtype,
                       int device_index);

// Number of entries in the in-memory program cache (for tests and metrics).
size_t program_cache_size();

}  // namespace torchtpu::exec
