// Moving bytes between host memory and tpu buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "device/storage.h"
#include "stablehlo/types.h"

namespace torchtpu::exec {

// Copies `data` (dense row-major) into a new device buffer during the call.
device::BufferPtr upload(const void* data, const std::vector<int64_t>& dims,
                         shlo::ElementType dtype, int device);
// A contiguous CPU tensor's elements as a new device buffer of dims
// device::buffer_dims(host.sizes()) (zeros after them where that is a size bucket); copied
// during the call.
device::BufferPtr upload_dense(const at::Tensor& host, int device);
// Like upload, for a contiguous CPU tensor the caller hands over: the device buffer may alias
// `host`'s memory (XLA:CPU: no copy and no fresh allocation, whose page faults cost more than the
// copy) or be filled after the call; `host` is kept alive until the plugin is done with it. The
// caller must not write into `host` afterwards. Its dims are device::buffer_dims(host.sizes());
// a size bucket larger than the tensor takes a padded copy instead of `host`'s memory.
device::BufferPtr upload_lent(const at::Tensor& host, int device);
// A device buffer holding `t`'s elements in row-major order from its start (padding may
// follow them), with dims device::buffer_dims(t.sizes()), without a program when the storage
// already is exactly that.
device::BufferPtr contiguous_buffer(const at::Tensor& t);
// A new contiguous CPU tensor with `t`'s values; waits for the device.
at::Tensor to_cpu(const at::Tensor& t);
// The same into `out` (a contiguous CPU tensor of t's sizes and dtype), e.g. reused memory.
void to_cpu_into(const at::Tensor& t, const at::Tensor& out);
// Waits until all work launched on `device` so far is done.
void synchronize(int device);

}  // namespace torchtpu::exec
