// empty / empty_strided: storage is allocated lazily, so these touch no device memory.
// triu_indices / tril_indices: checked as on the CPU, then their lowered out= forms compute the
// indices on the device (lowering/trilu_indices.cpp).
// _efficientzerotensor: a tensor without storage, as on the CPU and CUDA.
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tril_indices.h>
#include <ATen/ops/triu_indices.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "device/current_device.h"
#include "device/storage.h"
#include "exec/executor.h"
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

// The CPU's checks (TensorFactories.h check_args, then its int32/int64 dispatch). `out` starts
// empty: the out= kernel sizes it (2, N) from the op's meta kernel.
template <bool kUpper>
at::Tensor trilu_indices(int64_t row, int64_t col, int64_t offset,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const char* name = kUpper ? "triu_indices" : "tril_indices";
  c10::ScalarType t = dtype.value_or(at::kLong);
  TORCH_CHECK(row >= 0, name, ": row must be non-negative, got ", row);
  TORCH_CHECK(col >= 0, name, ": col must be non-negative, got ", col);
  TORCH_CHECK(!layout || *layout == at::kStrided, name, ": only support layout=torch.strided, got ",
              *layout);
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kLong || t == at::kInt, "\"", name,
                              "\" not implemented for '", c10::toString(t), "'");
  c10::OptionalDeviceGuard guard(device);
  at::Tensor out = at::empty(
      {0}, at::TensorOptions().dtype(t).device(device.value_or(c10::Device(c10::kPrivateUse1))));
  return kUpper ? at::triu_indices_outf(row, col, offset, out)
                : at::tril_indices_outf(row, col, offset, out);
}

// Autograd's stand-in for a gradient known to be zero (sgn's for a real input): no storage; the
// ZeroTensor key materializes zeros only where an op needs the values. Built as the CPU's
// kernel builds it (no dtype check: nothing of that dtype is ever stored).
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
  c10::Device d = device.value_or(c10::Device(c10::kPrivateUse1));
  if (!d.has_index()) d = c10::Device(c10::kPrivateUse1, device::current_device());
  at::native::ZeroTensorAllocator allocator(d);
  auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
              c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  c10::ScalarType t = dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
  return at::detail::empty_generic(size, &allocator, keys, t, std::nullopt);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("_efficientzerotensor", efficientzerotensor);
  m.impl("empty_strided", empty_strided);
  m.impl("triu_indices", trilu_indices<true>);
  m.impl("tril_indices", trilu_indices<false>);
  // Lowered as themselves; without this their CompositeExplicitAutograd kernels would call the
  // functional forms above, which call these.
  for (const char* name : {"triu_indices.out", "tril_indices.out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
  }
}

}  // namespace
}  // namespace torchtpu::aten
