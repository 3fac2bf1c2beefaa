// View ops are metadata over the shared storage; PyTorch's generic implementations work
// for any device whose storage is real, which ours is.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorShape.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

#include "device/storage.h"
#include "exec/host_transfer.h"
#include "lowering/lowering.h"
#include "lowering/strided.h"

namespace torchtpu::aten {

// Grows (or shrinks) a storage, keeping its leading bytes. Rare (resize_ past the end, or an
// untyped storage resize), so the old contents take a host round trip.
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  auto* handle = device::handle_of(storage);
  device::BufferPtr old = handle->buffer();
  if (old) {
    std::vector<int64_t> dims = handle->dims();
    shlo::ElementType dtype = handle->dtype();
    int64_t itemsize = std::max(1, shlo::bit_width(dtype) / 8);
    int64_t old_n = lowering::numel_of(dims);
    std::vector<uint8_t> host(static_cast<size_t>(old_n * itemsize));
    if (!host.empty()) old->to_host(host.data(), host.size());
    // The storage's old bytes (not a size bucket's padding past them) keep their place; the
    // new buffer is the new size's bucket (zeros after the kept bytes).
    const size_t kept = std::min<size_t>(host.size(), storage.nbytes());
    int64_t new_n = static_cast<int64_t>(new_bytes) / itemsize;
    int64_t stored_n = device::buffer_dims({new_n})[0];
    std::vector<uint8_t> grown(static_cast<size_t>(stored_n * itemsize), 0);
    std::memcpy(grown.data(), host.data(), std::min(grown.size(), kept));
    handle->set_buffer(exec::upload(grown.data(), {stored_n}, dtype, handle->device_index()),
                       {stored_n}, dtype);
  }
  storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
  handle->set_logical_bytes(static_cast<int64_t>(new_bytes));
}

namespace {

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  int64_t numel = c10::multiply_integers(size);
  size_t needed = static_cast<size_t>((numel + self.storage_offset()) * self.element_size());
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  std::optional<c10::IntArrayRef> st;
  if (!stride.empty()) st = stride;
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, st, /*resize_storage=*/false);
  // Like CPU's set_: a storage too small for the new geometry grows (keeping its contents).
  if (self.numel() > 0) {
    size_t needed =
        at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(), offset);
    if (needed > self.storage().nbytes()) {
      TORCH_CHECK(self.storage().resizable(), "Trying to resize storage that is not resizable");
      resize_storage_bytes(self.storage(), needed);
    }
  }
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device::allocator(), true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// Module._apply (model.to("tpu"), .float(), ...) asks this to decide between `param.data = new`
// (the same Parameter object, so tied weights stay tied and optimizer references stay valid)
// and replacing the Parameter. c10 answers true only for its own list of dense backends, and
// leaves PrivateUse1 to say so itself: a dense tpu tensor is as interchangeable with a dense
// tensor of any of those backends as CUDA's is.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto is_dense = [](c10::DispatchKeySet ks) {
    constexpr auto dense_backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit,
         c10::BackendComponent::MPSBit, c10::BackendComponent::HIPBit,
         c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(dense_backends);
  };
  if (is_dense(self.key_set()) && is_dense(from.key_set())) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  // dtype-changing views over the same storage; reads and writes reinterpret its bytes.
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
}

}  // namespace
}  // namespace torchtpu::aten
