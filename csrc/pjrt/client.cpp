#include <exception>
#include <iostream>

#include "pjrt/fork_state.h"
#include "pjrt/kv_store.h"
#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {
namespace {

// The NamedValues point into `options`, which must outlive them.
std::vector<PJRT_NamedValue> to_named_values(const std::map<std::string, Attribute>& options) {
  std::vector<PJRT_NamedValue> values;
  values.reserve(options.size());
  for (const auto& [name, attribute] : options) {
    PJRT_NamedValue value{};
    value.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    value.name = name.c_str();
    value.name_size = name.size();
    value.value_size = 1;
    if (const auto* s = std::get_if<std::string>(&attribute)) {
      value.type = PJRT_NamedValue_kString;
      value.string_value = s->c_str();
      value.value_size = s->size();
    } else if (const auto* i = std::get_if<int64_t>(&attribute)) {
      value.type = PJRT_NamedValue_kInt64;
      value.int64_value = *i;
    } else if (const auto* list = std::get_if<std::vector<int64_t>>(&attribute)) {
      value.type = PJRT_NamedValue_kInt64List;
      value.int64_array_value = list->data();
      value.value_size = list->size();
    } else if (const auto* b = std::get_if<bool>(&attribute)) {
      value.type = PJRT_NamedValue_kBool;
      value.bool_value = *b;
    } else {
      value.type = PJRT_NamedValue_kFloat;
      value.float_value = std::get<float>(attribute);
    }
    values.push_back(value);
  }
  return values;
}

}  // namespace

Client::Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client)
    : plugin_(std::move(plugin)), client_(client) {}

std::unique_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin,
                                       const std::map<std::string, Attribute>& options,
                                       KvStore* kv_store) {
  if (plugin == nullptr) throw Error("Client::create: null plugin");
  std::vector<PJRT_NamedValue> values = to_named_values(options);
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = values.data();
  args.num_options = values.size();
  attach_kv_store(args, kv_store);
  plugin->call(&PJRT_Api::PJRT_Client_Create, &args, "PJRT_Client_Create");
  // Owning the client before enumerating devices frees it if enumeration throws.
  std::unique_ptr<Client> client(new Client(plugin, args.client));

  PJRT_Client_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devices.client = client->client_;
  plugin->call(&PJRT_Api::PJRT_Client_AddressableDevices, &devices,
               "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < devices.num_addressable_devices; ++i) {
    client->devices_.push_back(std::make_unique<Device>(plugin, devices.addressable_devices[i]));
  }
  return client;
}

Client::~Client() {
  if (in_forked_child()) return;
  devices_.clear();
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client_;
  try {
    plugin_->call(&PJRT_Api::PJRT_Client_Destroy, &args, "PJRT_Client_Destroy");
  } catch (const std::exception& e) {
    std::cerr << "torchtpu: " << e.what() << "\n";
  }
}

std::string Client::platform_name() const {
  PJRT_Client_PlatformName_Args args{};
  args.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  args.client = client_;
  plugin_->call(&PJRT_Api::PJRT_Client_PlatformName, &args, "PJRT_Client_PlatformName");
  return std::string(args.platform_name, args.platform_name_size);
}

std::string Client::platform_version() const {
  PJRT_Client_PlatformVersion_Args args{};
  args.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
  args.client = client_;
  plugin_->call(&PJRT_Api::PJRT_Client_PlatformVersion, &args, "PJRT_Client_PlatformVersion");
  return std::string(args.platform_version, args.platform_version_size);
}

int Client::process_index() const {
  PJRT_Client_ProcessIndex_Args args{};
  args.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  args.client = client_;
  plugin_->call(&PJRT_Api::PJRT_Client_ProcessIndex, &args, "PJRT_Client_ProcessIndex");
  return args.process_index;
}

std::unique_ptr<Buffer> Client::buffer_from_host(const void* data, PJRT_Buffer_Type type,
                                                 const std::vector<int64_t>& dims,
                                                 const Device& device, HostSemantics semantics,
                                                 std::unique_ptr<Event>* done_with_host) const {
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = client_;
  args.data = data;
  args.type = type;
  args.dims = dims.data();
  args.num_dims = dims.size();
  switch (semantics) {
    case HostSemantics::kCopyDuringCall:
      args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
      break;
    case HostSemantics::kImmutableUntilTransferCompletes:
      args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
      break;
    case HostSemantics::kMutableZeroCopy:
      // Its event may fire only when the buffer dies, so nobody waiting for it here is an error.
      if (done_with_host == nullptr) {
        throw Error("Client::buffer_from_host: kMutableZeroCopy needs done_with_host");
      }
      args.host_buffer_semantics = PJRT_HostBufferSemantics_kMutableZeroCopy;
      break;
  }
  // With memory left null the plugin places the buffer in the device's default memory.
  args.device = device.raw();
  plugin_->call(&PJRT_Api::PJRT_Client_BufferFromHostBuffer, &args,
                "PJRT_Client_BufferFromHostBuffer");
  auto buffer = std::make_unique<Buffer>(plugin_, args.buffer);
  auto done = std::make_unique<Event>(plugin_, args.done_with_host_buffer);
  if (semantics != HostSemantics::kCopyDuringCall) {
    if (done_with_host != nullptr) {
      *done_with_host = std::move(done);
    } else {
      // Nobody could learn when `data` may be reused, so the transfer must finish here.
      done->await();
    }
  }
  // For kCopyDuringCall the plugin no longer reads `data`; dropping the event is enough.
  return buffer;
}

std::unique_ptr<Executable> Client::compile(const std::string& mlir_text,
                                            const std::string& compile_options) const {
  // An empty CompileOptionsProto means zero replicas, on which the XLA CPU plugin CHECK-fails
  // and aborts the process instead of returning an error.
  if (compile_options.empty()) {
    throw Error("Client::compile: compile_options is empty; pass portable_compile_options()");
  }
  static constexpr char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  // The C API takes char* but only reads the code when compiling.
  program.code = const_cast<char*>(mlir_text.data());
  program.code_size = mlir_text.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;

  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = client_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  plugin_->call(&PJRT_Api::PJRT_Client_Compile, &args, "PJRT_Client_Compile");
  return std::make_unique<Executable>(plugin_, args.executable);
}

std::unique_ptr<Executable> Client::deserialize(const std::string& serialized,
                                                const std::string& compile_options) const {
  PJRT_Executable_DeserializeAndLoad_Args args{};
  args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  args.client = client_;
  args.serialized_executable = serialized.data();
  args.serialized_executable_size = serialized.size();
  if (!compile_options.empty()) {
    args.overridden_serialized_compile_options = compile_options.data();
    args.overridden_serialized_compile_options_size = compile_options.size();
  }
  plugin_->call(&PJRT_Api::PJRT_Executable_DeserializeAndLoad, &args,
                "PJRT_Executable_DeserializeAndLoad");
  return std::make_unique<Executable>(plugin_, args.loaded_executable);
}

}  // namespace torchtpu::pjrt
