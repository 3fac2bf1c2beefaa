// torch.kaiser_window on tpu. PyTorch's kernel fills the window through a DispatchStub that has
// no tpu entry (an internal assert); this one checks the arguments as the CPU does (in its
// words), then fills `out` with the lowered kaiser_window.beta_out (lowering/kaiser_window.cpp):
// one program, no CPU round trip.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

at::Tensor kaiser_window(int64_t window_length, bool periodic, double beta,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  at::TensorOptions options = at::TensorOptions()
                                  .dtype(dtype)
                                  .layout(layout)
                                  .device(device.value_or(c10::Device(c10::kPrivateUse1)))
                                  .pinned_memory(pin_memory);
  // The CPU's window_function_checks, in its words.
  TORCH_CHECK(options.layout() != at::kSparse,
              "kaiser_window is not implemented for sparse types, got: ", options);
  c10::ScalarType t = c10::typeMetaToScalarType(options.dtype());
  TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t),
              "kaiser_window expects floating point dtypes, got: ", options);
  TORCH_CHECK(window_length >= 0, "kaiser_window requires non-negative window_length, got ",
              "window_length=", window_length);
  c10::OptionalDeviceGuard guard(device);
  at::Tensor out = at::empty({window_length}, options);
  return at::kaiser_window_outf(window_length, periodic, beta, out);
}

// The shorter forms' composite kernels call PyTorch's implementation directly, not through the
// dispatcher: they need kernels of their own (defaults: periodic, beta 12, as on the CPU).
at::Tensor kaiser_window_periodic(int64_t window_length, bool periodic,
                                  std::optional<c10::ScalarType> dtype,
                                  std::optional<c10::Layout> layout,
                                  std::optional<c10::Device> device,
                                  std::optional<bool> pin_memory) {
  return kaiser_window(window_length, periodic, 12.0, dtype, layout, device, pin_memory);
}

at::Tensor kaiser_window_default(int64_t window_length, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout,
                                 std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  return kaiser_window(window_length, true, 12.0, dtype, layout, device, pin_memory);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("kaiser_window.beta", kaiser_window);
  m.impl("kaiser_window.periodic", kaiser_window_periodic);
  m.impl("kaiser_window", kaiser_window_default);
}

}  // namespace
}  // namespace torchtpu::aten
