// PrivateUse1 hooks: what torch.accelerator, torch.Generator(device="tpu") and pinned-memory
// code ask of a backend.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include "device/current_device.h"
#include "device/generator.h"
#include "device/storage.h"
#include "runtime/runtime.h"

namespace torchtpu::aten {
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);
}

namespace torchtpu::device {
at::HostAllocator* pinned_allocator();
bool is_pinned_ptr(const void* data);

namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return runtime::is_available(); }
  void init() const override {}
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index < 0 ? current_device() : device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return at::make_generator<TpuGeneratorImpl>(
        device_index < 0 ? static_cast<c10::DeviceIndex>(current_device()) : device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return at::Device(c10::DeviceType::PrivateUse1,
                      static_cast<c10::DeviceIndex>(current_device()));
  }
  // Pinned host memory: page-aligned blocks the allocator tracks (csrc/device/pinned.cpp).
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return runtime::is_initialized();
  }
  c10::DeviceIndex deviceCount() const override {
    // Without creating the runtime: asking must not hold the device (runtime::device_count).
    return static_cast<c10::DeviceIndex>(runtime::device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = getCurrentDevice();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

void TpuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  aten::resize_storage_bytes(storage, newsize);
}

}  // namespace

void register_hooks() {
  // torch.UntypedStorage(n, device="tpu") and deepcopy ask the device type's allocator.
  c10::SetAllocator(c10::DeviceType::PrivateUse1, allocator());
  // torch.accelerator.empty_host_cache() and pinned-memory code ask the device type's host
  // allocator; without one they dereference null once tpu is initialized.
  at::setHostAllocator(c10::DeviceType::PrivateUse1, pinned_allocator());
  static TpuHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
}

}  // namespace torchtpu::device
