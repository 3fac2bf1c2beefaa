// Moving bytes between host memory and tpu buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "device/storage.h"
#include "stablehlo/types.h"

namespace torchtpu::aten {

// Copies `data` (dense row-major) into a new device buffer during the call.
device::BufferPtr upload(const void* data, const std::vector<int64_t>& dims,
                         shlo::ElementType dtype, int device);
// A device buffer holding `t`'s elements in row-major order with dims == t.sizes(), without a
// program when the storage already is exactly that.
device::BufferPtr contiguous_buffer(const at::Tensor& t);
// A new contiguous CPU tensor with `t`'s values; waits for the device.
at::Tensor to_cpu(const at::Tensor& t);
// The same into `out` (a contiguous CPU tensor of t's sizes and dtype), e.g. reused memory.
void to_cpu_into(const at::Tensor& t, const at::Tensor& out);
// The logical values of a tpu tensor with the conjugate and/or negative bit (lazy conj() and
// neg views) as a plain tensor: the bits are cleared on an alias and applied by a program.
at::Tensor resolve_bits(const at::Tensor& t);
// Waits until all work launched on `device` so far is done.
void synchronize(int device);

}  // namespace torchtpu::aten
