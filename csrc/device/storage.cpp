#include "device/storage.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <utility>

#include "device/buckets.h"
#include "device/current_device.h"
#include "runtime/runtime.h"

namespace torchtpu::device {
namespace {

constexpr int kMaxDevices = 64;
std::array<std::atomic<int64_t>, kMaxDevices> allocated{};
std::array<std::atomic<int64_t>, kMaxDevices> peak{};
// Cumulative bytes that became / stopped being device buffers of storages (reset separately).
std::array<std::atomic<int64_t>, kMaxDevices> total_allocated{};
std::array<std::atomic<int64_t>, kMaxDevices> total_freed{};
// The device buffers' bytes, which exceed the storages' own (above) by the padding of size
// buckets (device/buckets.h).
std::array<std::atomic<int64_t>, kMaxDevices> buffered{};
std::array<std::atomic<int64_t>, kMaxDevices> buffered_peak{};

void raise_peak(std::atomic<int64_t>& peak_bytes, int64_t now) {
  int64_t p = peak_bytes.load();
  while (now > p && !peak_bytes.compare_exchange_weak(p, now)) {
  }
}

void account_buffer(int device, int64_t delta) {
  if (device < 0 || device >= kMaxDevices || delta == 0) return;
  raise_peak(buffered_peak[device], buffered[device].fetch_add(delta) + delta);
}

void account(int device, int64_t delta) {
  if (device < 0 || device >= kMaxDevices) return;
  int64_t now = allocated[device].fetch_add(delta) + delta;
  if (delta > 0) total_allocated[device] += delta;
  if (delta < 0) total_freed[device] -= delta;
  raise_peak(peak[device], now);
}

bool valid(c10::DeviceIndex device) { return device >= 0 && device < kMaxDevices; }

// Bytes the host could still give (MemAvailable): the XLA CPU plugin's device memory is the
// host's, and it reports no memory stats of its own. -1 if unknown.
int64_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

// (free, total) bytes of the device's memory; free < 0 when the plugin cannot tell.
std::pair<int64_t, int64_t> device_memory(int device) {
  pjrt::MemoryStats s = runtime::get().device(device).memory_stats();
  if (s.bytes_limit >= 0 && s.bytes_in_use >= 0) {
    return {std::max<int64_t>(s.bytes_limit - s.bytes_in_use, 0), s.bytes_limit};
  }
  if (runtime::get().platform() == "cpu") {
    int64_t pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return {host_available_bytes(), pages > 0 && page > 0 ? pages * page : -1};
  }
  return {-1, -1};
}

std::string gib(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1 << 30) << " GiB";
  return os.str();
}

// Device buffers appear lazily (at the first write), so without this an empty() larger than the
// device only failed at its first use. Like CUDA's allocator, a request that the device cannot
// hold now raises OutOfMemoryError at the call; the process stays usable. Only requests of a
// GiB or more ask the plugin, so small allocations stay free of PJRT calls.
void check_fits_device(size_t nbytes, int device) {
  constexpr size_t kCheckFrom = size_t{1} << 30;
  if (nbytes < kCheckFrom) return;
  auto [free, total] = device_memory(device);
  if (free < 0) return;
  TORCH_CHECK_WITH(OutOfMemoryError, nbytes <= static_cast<size_t>(free),
                   "torchtpu: out of memory: tried to allocate ", gib(static_cast<int64_t>(nbytes)),
                   " (", nbytes, " bytes) on tpu:", device, ", which has ", gib(free), " free of ",
                   gib(total), " total");
}

int64_t buffer_bytes(const std::vector<int64_t>& dims, shlo::ElementType dtype) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n * std::max(1, shlo::bit_width(dtype) / 8);
}

void delete_handle(void* ctx) { delete static_cast<StorageHandle*>(ctx); }

std::atomic<DeferredHook> deferred_hook{nullptr};

void run_deferred(const StorageHandle& h, bool write) {
  if (DeferredHook hook = deferred_hook.load(std::memory_order_acquire)) hook(h, write);
}

// A DeviceAllocator, so that torch.accelerator.memory_allocated() / memory_stats() /
// reset_peak_memory_stats() / empty_cache() work for tpu as they do for cuda. There is no
// cache: a PJRT buffer is freed when its last storage dies, so reserved == allocated.
class TpuAllocator final : public c10::DeviceAllocator {
 public:
  bool initialized() override { return runtime::is_initialized(); }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    if (!valid(device)) return stats;
    c10::CachingAllocator::Stat bytes;
    bytes.current = allocated[device].load();
    bytes.peak = peak[device].load();
    bytes.allocated = total_allocated[device].load();
    bytes.freed = total_freed[device].load();
    auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    stats.allocated_bytes[agg] = bytes;
    stats.reserved_bytes[agg] = bytes;
    stats.active_bytes[agg] = bytes;
    stats.requested_bytes[agg] = bytes;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (!valid(device)) return;
    total_allocated[device] = 0;
    total_freed[device] = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak_memory(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    pjrt::MemoryStats s = runtime::get().device(device).memory_stats();
    TORCH_CHECK_NOT_IMPLEMENTED(s.bytes_limit >= 0 && s.bytes_in_use >= 0, "torchtpu: the ",
                                runtime::get().platform(),
                                " PJRT plugin does not report device memory");
    size_t limit = static_cast<size_t>(s.bytes_limit);
    size_t used = static_cast<size_t>(s.bytes_in_use);
    return {used < limit ? limit - used : 0, limit};
  }

  c10::DataPtr allocate(size_t nbytes) override {
    // Allocation is lazy: the device buffer appears on the first write. No GIL, no PJRT here.
    int index = current_device();
    check_fits_device(nbytes, index);
    auto* handle = new StorageHandle(index, static_cast<int64_t>(nbytes));
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

StorageHandle::StorageHandle(int device_index, BufferPtr buffer, std::vector<int64_t> dims,
                             shlo::ElementType dtype, int64_t logical_bytes)
    : device_index_(device_index),
      buffer_(std::move(buffer)),
      dims_(std::move(dims)),
      dtype_(dtype),
      accounted_bytes_(buffer_ ? buffer_bytes(dims_, dtype_) : 0),
      logical_bytes_(logical_bytes),
      accounted_logical_(buffer_ ? std::min(logical_bytes, accounted_bytes_) : 0) {
  account_buffer(device_index_, accounted_bytes_);
  account(device_index_, accounted_logical_);
}

StorageHandle::~StorageHandle() {
  account_buffer(device_index_, -accounted_bytes_);
  account(device_index_, -accounted_logical_);
}

BufferPtr StorageHandle::buffer() const {
  if (deferred() == Deferred::kWritten) run_deferred(*this, false);
  std::lock_guard<std::mutex> g(mutex_);
  return buffer_;
}

void StorageHandle::set_buffer(BufferPtr buffer, std::vector<int64_t> dims,
                               shlo::ElementType dtype) {
  if (deferred() != Deferred::kNone) run_deferred(*this, true);
  int64_t bytes = buffer ? buffer_bytes(dims, dtype) : 0;
  BufferPtr old;
  {
    std::lock_guard<std::mutex> g(mutex_);
    old = std::move(buffer_);
    buffer_ = std::move(buffer);
    dims_ = std::move(dims);
    dtype_ = dtype;
    account_buffer(device_index_, bytes - accounted_bytes_);
    accounted_bytes_ = bytes;
    const int64_t logical_now = buffer_ ? std::min(logical_bytes_, bytes) : 0;
    account(device_index_, logical_now - accounted_logical_);
    accounted_logical_ = logical_now;
  }
  // `old` is released outside the lock: destroying a PJRT buffer may wait on the plugin.
}

void StorageHandle::set_logical_bytes(int64_t bytes) {
  std::lock_guard<std::mutex> g(mutex_);
  logical_bytes_ = bytes;
  const int64_t logical_now = buffer_ ? std::min(logical_bytes_, accounted_bytes_) : 0;
  account(device_index_, logical_now - accounted_logical_);
  accounted_logical_ = logical_now;
}

void StorageHandle::snapshot(BufferPtr* buffer, std::vector<int64_t>* dims,
                             shlo::ElementType* dtype) const {
  if (deferred() == Deferred::kWritten) run_deferred(*this, false);
  std::lock_guard<std::mutex> g(mutex_);
  *buffer = buffer_;
  *dims = dims_;
  *dtype = dtype_;
}

void set_deferred_hook(DeferredHook hook) { deferred_hook.store(hook, std::memory_order_release); }

StorageHandle* handle_of(const c10::Storage& storage) {
  auto* h = static_cast<StorageHandle*>(storage.data_ptr().get_context());
  TORCH_CHECK(h != nullptr && storage.data_ptr().get_deleter() == &delete_handle,
              "torchtpu: storage is not a tpu storage");
  return h;
}

c10::Allocator* allocator() { return &the_allocator; }

bool flat_buffers() {
  // The plugin is fixed for the process's life: asked once.
  static const bool flat = [] {
    const std::string& p = runtime::get().platform();
    return p == "cpu" || p == "cuda" || p == "rocm";
  }();
  return flat;
}

std::vector<int64_t> buffer_dims(c10::IntArrayRef sizes) {
  if (!flat_buffers()) return sizes.vec();
  return {bucket_elements(c10::multiply_integers(sizes))};
}

bool exactly_holds(const std::vector<int64_t>& dims, int64_t n) {
  int64_t have = 1;
  for (int64_t d : dims) have *= d;
  return have == n;
}

c10::Storage make_storage(size_t nbytes, int device_index, BufferPtr buffer,
                          std::vector<int64_t> dims, shlo::ElementType dtype) {
  auto* handle = new StorageHandle(device_index, std::move(buffer), std::move(dims), dtype,
                                   static_cast<int64_t>(nbytes));
  c10::DataPtr ptr(
      handle, handle, &delete_handle,
      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_index)));
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(ptr), &the_allocator,
                      /*resizable=*/true);
}

int64_t memory_allocated(int device_index) {
  return device_index >= 0 && device_index < kMaxDevices ? allocated[device_index].load() : 0;
}

int64_t max_memory_allocated(int device_index) {
  return device_index >= 0 && device_index < kMaxDevices ? peak[device_index].load() : 0;
}

int64_t buffer_memory_allocated(int device_index) {
  return device_index >= 0 && device_index < kMaxDevices ? buffered[device_index].load() : 0;
}

int64_t max_buffer_memory_allocated(int device_index) {
  return device_index >= 0 && device_index < kMaxDevices ? buffered_peak[device_index].load() : 0;
}

void reset_peak_memory(int device_index) {
  if (device_index >= 0 && device_index < kMaxDevices) {
    peak[device_index].store(allocated[device_index].load());
    buffered_peak[device_index].store(buffered[device_index].load());
  }
}

}  // namespace torchtpu::device
