#include "device/storage.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>

#include "device/current_device.h"

namespace torchtpu::device {
namespace {

constexpr int kMaxDevices = 64;
std::array<std::atomic<int64_t>, kMaxDevices> allocated{};
std::array<std::atomic<int64_t>, kMaxDevices> peak{};

void account(int device, int64_t delta) {
  if (device < 0 || device >= kMaxDevices) return;
  int64_t now = allocated[device].fetch_add(delta) + delta;
  int64_t p = peak[device].load();
  while (now > p && !peak[device].compare_exchange_weak(p, now)) {
  }
}

int64_t buffer_bytes(const std::vector<int64_t>& dims, shlo::ElementType dtype) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n * std::max(1, shlo::bit_width(dtype) / 8);
}

void delete_handle(void* ctx) { delete static_cast<StorageHandle*>(ctx); }

class TpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    // Allocation is lazy: the device buffer appears on the first write. No GIL, no PJRT here.
    int index = current_device();
    auto* handle = new StorageHandle(index);
    return {handle, handle, &delete_handle,
            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "torchtpu: tpu storages cannot be copied as raw host memory");
  }
};

TpuAllocator the_allocator;

}  // namespace

StorageHandle::~StorageHandle() { account(device_index_, -accounted_bytes_); }

BufferPtr StorageHandle::buffer() const {
  std::lock_guard<std::mutex> g(mutex_);
  return buffer_;
}

void StorageHandle::set_buffer(BufferPtr buffer, std::vector<int64_t> dims,
                               shlo::ElementType dtype) {
  int64_t bytes = buffer ? buffer_bytes(dims, dtype) : 0;
  BufferPtr old;
  {
    std::lock_guard<std::mutex> g(mutex_);
    old = std::move(buffer_);
    buffer_ = std::move(buffer);
    dims_ = std::move(dims);
    dtype_ = dtype;
    account(device_index_, bytes - accounted_bytes_);
    accounted_bytes_ = bytes;
  }
  // `old` is released outside the lock: destroying a PJRT buffer may wait on the plugin.
}

void StorageHandle::snapshot(BufferPtr* buffer, std::vector<int64_t>* dims,
                             shlo::ElementType* dtype) const {
  std::lock_guard<std::mutex> g(mutex_);
  *buffer = buffer_;
  *dims = dims_;
  *dtype = dtype_;
}

StorageHandle* handle_of(const c10::Storage& storage) {
  auto* h = static_cast<StorageHandle*>(storage.data_ptr().get_context());
  TORCH_CHECK(h != nullptr && storage.data_ptr().get_deleter() == &delete_handle,
              "torchtpu: storage is not a tpu storage");
  return h;
}

c10::Allocator* allocator() { return &the_allocator; }

c10::Storage make_storage(size_t nbytes, int device_index, BufferPtr buffer,
                          std::vector<int64_t> dims, shlo::ElementType dtype) {
  auto* handle = new StorageHandle(device_index);
  handle->set_buffer(std::move(buffer), std::move(dims), dtype);
  c10::DataPtr ptr(handle, handle, &delete_handle,
                   c10::Device(c10::DeviceType::PrivateUse1,
                               static_cast<c10::DeviceIndex>(device_index)));
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(ptr), &the_allocator,
                      /*resizable=*/true);
}

int64_t memory_allocated(int device_index) {
  return device_index >= 0 && device_index < kMaxDevices ? allocated[device_index].load() : 0;
}

int64_t max_memory_allocated(int device_index) {
  return device_index >= 0 && device_index < kMaxDevices ? peak[device_index].load() : 0;
}

void reset_peak_memory(int device_index) {
  if (device_index >= 0 && device_index < kMaxDevices) {
    peak[device_index].store(allocated[device_index].load());
  }
}

}  // namespace torchtpu::device
