#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {
namespace {

PJRT_DeviceDescription* description(const Plugin& plugin, PJRT_Device* device) {
  PJRT_Device_GetDescription_Args args{};
  args.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  args.device = device;
  plugin.call(&PJRT_Api::PJRT_Device_GetDescription, &args, "PJRT_Device_GetDescription");
  return args.device_description;
}

}  // namespace

Device::Device(std::shared_ptr<Plugin> plugin, PJRT_Device* device)
    : plugin_(std::move(plugin)), device_(device) {}

int Device::id() const {
  PJRT_DeviceDescription_Id_Args args{};
  args.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  args.device_description = description(*plugin_, device_);
  plugin_->call(&PJRT_Api::PJRT_DeviceDescription_Id, &args, "PJRT_DeviceDescription_Id");
  return args.id;
}

int Device::local_hardware_id() const {
  PJRT_Device_LocalHardwareId_Args args{};
  args.struct_size = PJRT_Device_LocalHardwareId_Args_STRUCT_SIZE;
  args.device = device_;
  plugin_->call(&PJRT_Api::PJRT_Device_LocalHardwareId, &args, "PJRT_Device_LocalHardwareId");
  return args.local_hardware_id;
}

std::string Device::kind() const {
  PJRT_DeviceDescription_Kind_Args args{};
  args.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  args.device_description = description(*plugin_, device_);
  plugin_->call(&PJRT_Api::PJRT_DeviceDescription_Kind, &args, "PJRT_DeviceDescription_Kind");
  return std::string(args.device_kind, args.device_kind_size);
}

std::string Device::debug_string() const {
  PJRT_DeviceDescription_DebugString_Args args{};
  args.struct_size = PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE;
  args.device_description = description(*plugin_, device_);
  plugin_->call(&PJRT_Api::PJRT_DeviceDescription_DebugString, &args,
                "PJRT_DeviceDescription_DebugString");
  return std::string(args.debug_string, args.debug_string_size);
}

MemoryStats Device::memory_stats() const {
  MemoryStats stats;
  if (plugin_->api()->PJRT_Device_MemoryStats == nullptr) {
    stats.bytes_in_use = -1;
    return stats;
  }
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = device_;
  try {
    plugin_->call(&PJRT_Api::PJRT_Device_MemoryStats, &args, "PJRT_Device_MemoryStats");
  } catch (const Error& e) {
    // The C API lets plugins (the CPU one among them) leave memory stats unimplemented.
    if (e.code() != PJRT_Error_Code_UNIMPLEMENTED) throw;
    stats.bytes_in_use = -1;
    return stats;
  }
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

std::vector<std::string> Device::memory_kinds() const {
  PJRT_Device_AddressableMemories_Args args{};
  args.struct_size = PJRT_Device_AddressableMemories_Args_STRUCT_SIZE;
  args.device = device_;
  plugin_->call(&PJRT_Api::PJRT_Device_AddressableMemories, &args,
                "PJRT_Device_AddressableMemories");
  std::vector<std::string> kinds;
  for (size_t i = 0; i < args.num_memories; ++i) {
    PJRT_Memory_Kind_Args kind{};
    kind.struct_size = PJRT_Memory_Kind_Args_STRUCT_SIZE;
    kind.memory = args.memories[i];
    plugin_->call(&PJRT_Api::PJRT_Memory_Kind, &kind, "PJRT_Memory_Kind");
    kinds.emplace_back(kind.kind, kind.kind_size);
  }
  return kinds;
}

}  // namespace torchtpu::pjrt
