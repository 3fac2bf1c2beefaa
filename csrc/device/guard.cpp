// DeviceGuard support for tpu: a thread-local current device and one default stream per device
// (PJRT orders work on a device itself, so streams carry no extra semantics yet).
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "device/current_device.h"
#include "runtime/runtime.h"

namespace torchtpu::device {
namespace {

thread_local int tls_current_device = 0;

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1,
                       static_cast<c10::DeviceIndex>(tls_current_device));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "expected a tpu device, got ", d);
    set_current_device(d.has_index() ? d.index() : 0);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    tls_current_device = d.has_index() ? d.index() : 0;
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override {
    return runtime::is_available() ? static_cast<c10::DeviceIndex>(runtime::get().device_count())
                                   : 0;
  }
  // Events: PJRT executions on one device complete in order, so recording is a no-op and
  // synchronizing waits for the device (see torch.tpu.synchronize).
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {}
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {}
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace

int current_device() { return tls_current_device; }

void set_current_device(int index) {
  if (runtime::is_initialized()) {
    // Validates the index with the same message as any other bad index.
    runtime::get().device(index);
  }
  tls_current_device = index;
}

}  // namespace torchtpu::device
