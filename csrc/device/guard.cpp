// DeviceGuard support for tpu: a thread-local current device and one default stream per device
// (PJRT orders work on a device itself, so streams carry no extra semantics yet).
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "device/current_device.h"
#include "runtime/inflight.h"
#include "runtime/runtime.h"

namespace torchtpu::device {
namespace {

thread_local int tls_current_device = 0;

// The thread that loaded the extension (the interpreter's main thread in practice).
const std::thread::id loading_thread = std::this_thread::get_id();
// Set once another thread selects a tpu device: PyTorch's autograd engine does that when it
// starts its per-device worker threads. See other_threads_selected_a_device().
std::atomic<bool> other_thread_selected_device{false};

void note_selecting_thread() {
  if (!other_thread_selected_device.load(std::memory_order_relaxed) &&
      std::this_thread::get_id() != loading_thread) {
    other_thread_selected_device.store(true, std::memory_order_relaxed);
  }
}

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
    note_selecting_thread();
    set_current_device(d.has_index() ? d.index() : 0);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    note_selecting_thread();
    tls_current_device = d.has_index() ? d.index() : 0;
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  // Every stream is the device's single in-order queue (stronger ordering than asked for).
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return runtime::is_available() ? static_cast<c10::DeviceIndex>(runtime::get().device_count())
                                   : 0;
  }
  // One in-order queue per device: PJRT executions on a device complete in order, so a stream
  // is the device's queue and an event marks "everything launched on its device so far".
  // Recording remembers the device; synchronizing waits for the device (torch.tpu.synchronize);
  // blocking a stream on an event needs nothing, the queue already orders them.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    c10::DeviceIndex d = device_index >= 0 ? device_index : stream.device_index();
    *event = reinterpret_cast<void*>(static_cast<intptr_t>(d) + 1);  // never null once recorded
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {}
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for, as in CUDA
    wait(static_cast<int>(reinterpret_cast<intptr_t>(event) - 1));
  }
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override { wait(stream.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { wait(device_index); }

 private:
  static void wait(int device) {
    if (runtime::is_initialized()) runtime::wait_for_executions(device);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace

int current_device() { return tls_current_device; }

bool other_threads_selected_a_device() { return other_thread_selected_device.load(); }

void set_current_device(int index) {
  if (runtime::is_initialized()) {
    // Validates the index with the same message as any other bad index.
    runtime::get().device(index);
  }
  tls_current_device = index;
}

}  // namespace torchtpu::device
