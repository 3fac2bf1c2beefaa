// DeviceGuard support for tpu: a thread-local current device, streams and events. PJRT orders
// work on a device itself, so every stream of a device is that one in-order queue.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "device/current_device.h"
#include "exec/fused_eager.h"
#include "runtime/device_checks.h"
#include "runtime/inflight.h"
#include "runtime/runtime.h"

namespace torchtpu::device {
namespace {

// Starts at the process's first own device: tpu:LOCAL_RANK under a multi-process launch
// (runtime/local_view.h), so `.to("tpu")` before set_device lands on it, else tpu:0.
thread_local int tls_current_device = runtime::first_local_device();
// The current stream id per device index for this thread (0: the default stream).
thread_local std::vector<c10::StreamId> tls_current_streams;
std::atomic<c10::StreamId> next_stream_id{1};

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
    // "tpu" without an index means the current device, as getDevice() says (FakeTensorMode's
    // factory dispatch sets it): it must not move a thread off its device to tpu:0 (thread
    // ranks, each on its own device, saw their fake tensors made on tpu:0).
    if (!d.has_index()) return;
    note_selecting_thread();
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (!d.has_index()) return;
    note_selecting_thread();
    tls_current_device = d.index();
  }
  // Every stream of a device is the device's single in-order PJRT queue; stream ids only give
  // streams an identity (so set_stream/current_stream round-trip), they order nothing extra.
  c10::Stream getStream(c10::Device d) const noexcept override {
    c10::DeviceIndex i = index_of(d);
    c10::StreamId id =
        static_cast<size_t>(i) < tls_current_streams.size() ? tls_current_streams[i] : 0;
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, i), id);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT,
                       c10::Device(c10::DeviceType::PrivateUse1, index_of(d)));
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    c10::Stream old = getStream(s.device());
    c10::DeviceIndex i = index_of(s.device());
    if (static_cast<size_t>(i) >= tls_current_streams.size()) tls_current_streams.resize(i + 1, 0);
    tls_current_streams[i] = s.id();
    return old;
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override { return new_stream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override {
    return new_stream(d);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    // Without creating the runtime: asking must not hold the device (runtime::device_count).
    return static_cast<c10::DeviceIndex>(runtime::device_count());
  }
  // An event is a runtime::Marker: every execution launched on its device before record().
  // Recording enqueues nothing (PJRT has no marker op); completion and its timestamp come from
  // the executions' PJRT completion callbacks.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    c10::DeviceIndex d = index_of(stream.device());
    TORCH_CHECK(device_index < 0 || device_index == d, "Event device index ", int(device_index),
                " does not match recording stream's device index ", int(d), ".");
    auto* e = static_cast<TpuEvent*>(*event);
    if (e == nullptr) {
      e = new TpuEvent;
      *event = e;
    }
    e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    // Fused eager: the work recorded so far is launched, so that the event captures it.
    if (exec::fused::enabled()) exec::fused::flush(d, exec::fused::Cause::kSync);
    e->marker = runtime::record_marker(d);
  }
  // One queue per device already orders later work after the event on the same device. Other
  // devices run their own queues: wait on the host there, the only order PJRT offers across
  // devices.
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    const auto& m = *static_cast<TpuEvent*>(event)->marker;
    if (m.device != index_of(stream.device())) {
      runtime::wait_marker(m);
      runtime::raise_failed_checks(m.device, /*only_ready=*/true);
    }
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || runtime::marker_done(*static_cast<TpuEvent*>(event)->marker);
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for, as in CUDA
    const auto& m = *static_cast<TpuEvent*>(event)->marker;
    runtime::wait_marker(m);
    // The checks of the captured work are read; later work's stay deferred.
    runtime::raise_failed_checks(m.device, /*only_ready=*/true);
  }
  // Milliseconds between the completion times of the two events' captured work (see
  // runtime::Marker::completed). c10::Event has checked the timing flags and completion.
  double elapsedTime(void* event1, void* event2,
                     const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(event1 != nullptr && event2 != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    auto* a = static_cast<TpuEvent*>(event1);
    auto* b = static_cast<TpuEvent*>(event2);
    TORCH_CHECK_VALUE(a->timing && b->timing,
                      "Both events must be created with argument 'enable_timing=True'.");
    TORCH_CHECK(runtime::marker_done(*a->marker) && runtime::marker_done(*b->marker),
                "Both events must be completed before calculating elapsed time.");
    return std::chrono::duration<double, std::milli>(b->marker->completed - a->marker->completed)
        .count();
  }
  bool queryStream(const c10::Stream& stream) const override {
    return !runtime::is_initialized() || runtime::executions_finished(index_of(stream.device()));
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    wait(index_of(stream.device()));
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { wait(device_index); }

 private:
  struct TpuEvent {
    std::shared_ptr<runtime::Marker> marker;
    bool timing = false;
  };

  static c10::DeviceIndex index_of(c10::Device d) {
    return d.has_index() ? d.index() : static_cast<c10::DeviceIndex>(tls_current_device);
  }
  static c10::Stream new_stream(c10::Device d) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index_of(d)),
                       next_stream_id++);
  }
  static void wait(int device) {
    if (exec::fused::enabled()) exec::fused::flush(device, exec::fused::Cause::kSync);
    if (!runtime::is_initialized()) return;
    runtime::wait_for_executions(device);
    runtime::raise_failed_checks(device);
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
