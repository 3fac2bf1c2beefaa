#include <chrono>
#include <condition_variable>
#include <exception>
#include <iostream>

#include "pjrt/fork_state.h"
#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {

struct Buffer::Pending {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // set by fail()
};

Buffer::Buffer(std::shared_ptr<Plugin> plugin, PJRT_Buffer* buffer)
    : plugin_(std::move(plugin)), buffer_(buffer) {}

std::shared_ptr<Buffer> Buffer::pending(std::shared_ptr<Plugin> plugin) {
  auto b = std::make_shared<Buffer>(std::move(plugin), nullptr);
  b->pending_ = std::make_unique<Pending>();
  return b;
}

PJRT_Buffer* Buffer::wait() const {
  if (!pending_) throw Error("torchtpu: use of a released PJRT buffer");
  std::unique_lock<std::mutex> lk(pending_->mutex);
  pending_->cv.wait(lk, [&] { return pending_->done; });
  if (!pending_->error.empty()) throw Error(pending_->error);
  return buffer_.load(std::memory_order_acquire);
}

bool Buffer::wait_for(int ms) const {
  if (ready() || !pending_) return true;
  std::unique_lock<std::mutex> lk(pending_->mutex);
  return pending_->cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return pending_->done; });
}

void Buffer::resolve(PJRT_Buffer* buffer) {
  std::lock_guard<std::mutex> g(pending_->mutex);
  buffer_.store(buffer, std::memory_order_release);
  pending_->done = true;
  pending_->cv.notify_all();
}

void Buffer::fail(const std::string& error) {
  std::lock_guard<std::mutex> g(pending_->mutex);
  pending_->error = error.empty() ? std::string("torchtpu: the producing program failed") : error;
  pending_->done = true;
  pending_->cv.notify_all();
}

Buffer::~Buffer() {
  PJRT_Buffer* buffer = buffer_.load();
  if (buffer == nullptr || in_forked_child()) return;
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = buffer;
  try {
    plugin_->call(&PJRT_Api::PJRT_Buffer_Destroy, &args, "PJRT_Buffer_Destroy");
  } catch (const std::exception& e) {
    std::cerr << "torchtpu: " << e.what() << "\n";
  }
}

PJRT_Buffer_Type Buffer::element_type() const {
  PJRT_Buffer_ElementType_Args args{};
  args.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_ElementType, &args, "PJRT_Buffer_ElementType");
  return args.type;
}

std::vector<int64_t> Buffer::dimensions() const {
  PJRT_Buffer_Dimensions_Args args{};
  args.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_Dimensions, &args, "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

size_t Buffer::on_device_size_in_bytes() const {
  PJRT_Buffer_OnDeviceSizeInBytes_Args args{};
  args.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_OnDeviceSizeInBytes, &args,
                "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

PJRT_Device* Buffer::device() const {
  PJRT_Buffer_Device_Args args{};
  args.struct_size = PJRT_Buffer_Device_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_Device, &args, "PJRT_Buffer_Device");
  return args.device;
}

std::unique_ptr<Event> Buffer::to_host_async(void* dst, size_t dst_size) const {
  if (in_forked_child()) throw Error(forked_child_message());
  const std::vector<int64_t> dims = dimensions();
  const size_t elem = element_size(element_type());
  if (elem != 0) {
    size_t expected = elem;
    for (int64_t d : dims) expected *= static_cast<size_t>(d);
    if (dst_size != expected) {
      throw Error("Buffer::to_host_async: destination holds " + std::to_string(dst_size) +
                  " bytes but the buffer's dense size is " + std::to_string(expected));
    }
  }

  // A null host layout means "the device layout", which need not be row-major on
  // accelerators (TPU tiles, for example), so ranks >= 2 ask for row-major explicitly.
  std::vector<int64_t> minor_to_major;
  for (size_t i = dims.size(); i > 0; --i) minor_to_major.push_back(static_cast<int64_t>(i - 1));
  PJRT_Buffer_MemoryLayout layout{};
  layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  layout.tiled.minor_to_major = minor_to_major.data();
  layout.tiled.minor_to_major_size = minor_to_major.size();

  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = raw();
  args.host_layout = dims.size() >= 2 ? &layout : nullptr;
  args.dst = dst;
  args.dst_size = dst_size;
  plugin_->call(&PJRT_Api::PJRT_Buffer_ToHostBuffer, &args, "PJRT_Buffer_ToHostBuffer");
  return std::make_unique<Event>(plugin_, args.event);
}

void Buffer::to_host(void* dst, size_t dst_size) const { to_host_async(dst, dst_size)->await(); }

std::unique_ptr<Buffer> Buffer::copy_to_device(const Device& device) const {
  if (in_forked_child()) throw Error(forked_child_message());
  PJRT_Buffer_CopyToDevice_Args args{};
  args.struct_size = PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE;
  args.buffer = raw();
  args.dst_device = device.raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_CopyToDevice, &args, "PJRT_Buffer_CopyToDevice");
  return std::make_unique<Buffer>(plugin_, args.dst_buffer);
}

std::unique_ptr<Event> Buffer::ready_event() const {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_ReadyEvent, &args, "PJRT_Buffer_ReadyEvent");
  return std::make_unique<Event>(plugin_, args.event);
}

void Buffer::delete_storage() {
  PJRT_Buffer_Delete_Args args{};
  args.struct_size = PJRT_Buffer_Delete_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_Delete, &args, "PJRT_Buffer_Delete");
}

bool Buffer::is_deleted() const {
  PJRT_Buffer_IsDeleted_Args args{};
  args.struct_size = PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE;
  args.buffer = raw();
  plugin_->call(&PJRT_Api::PJRT_Buffer_IsDeleted, &args, "PJRT_Buffer_IsDeleted");
  return args.is_deleted;
}

}  // namespace torchtpu::pjrt
