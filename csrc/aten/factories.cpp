// empty / empty_strided: storage is allocated lazily, so these touch no device memory.
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "device/storage.h"
#include "lowering/lowering.h"

namespace torchtpu::aten {
namespace {

void check_dtype(c10::ScalarType t) {
  // Raises NotImplementedError naming the dtype for complex and quantized types.
  (void)lowering::to_element_type(t);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  c10::ScalarType t = dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
  check_dtype(t);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, device::allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  c10::ScalarType t = dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
  check_dtype(t);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, device::allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
}

}  // namespace
}  // namespace torchtpu::aten
