// tensor.record_stream(stream) on tpu. CUDA needs it because its caching allocator hands a freed
// block to the next allocation at once, while a kernel queued on another stream may still read
// it. A tpu storage owns a ref-counted PJRT buffer, and PJRT keeps a buffer's device memory
// until every execution that uses it has finished, whichever thread frees the tensor. So there
// is nothing to record: the call checks its arguments like CUDA's and returns. Diffusers' group
// offloading with streams calls it on every onloaded parameter.
#include <c10/core/Stream.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(self.device().type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected a tpu tensor, got one on ", self.device());
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected a tpu stream, got one on ", stream.device());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("record_stream", record_stream); }

}  // namespace
}  // namespace torchtpu::aten
