#include <exception>
#include <iostream>

#include "pjrt/fork_state.h"
#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {
namespace {

void destroy_loaded(const Plugin& plugin, PJRT_LoadedExecutable* executable) {
  if (in_forked_child()) return;
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = executable;
  try {
    plugin.call(&PJRT_Api::PJRT_LoadedExecutable_Destroy, &args, "PJRT_LoadedExecutable_Destroy");
  } catch (const std::exception& e) {
    std::cerr << "torchtpu: " << e.what() << "\n";
  }
}

// The compile-time view of a loaded executable, which the C API hands out as a separate object
// the caller must destroy.
class CompiledView {
 public:
  CompiledView(const Plugin& plugin, PJRT_LoadedExecutable* loaded) : plugin_(plugin) {
    PJRT_LoadedExecutable_GetExecutable_Args args{};
    args.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
    args.loaded_executable = loaded;
    plugin_.call(&PJRT_Api::PJRT_LoadedExecutable_GetExecutable, &args,
                 "PJRT_LoadedExecutable_GetExecutable");
    executable_ = args.executable;
  }
  ~CompiledView() {
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable_;
    try {
      plugin_.call(&PJRT_Api::PJRT_Executable_Destroy, &args, "PJRT_Executable_Destroy");
    } catch (const std::exception& e) {
      std::cerr << "torchtpu: " << e.what() << "\n";
    }
  }
  CompiledView(const CompiledView&) = delete;
  CompiledView& operator=(const CompiledView&) = delete;
  PJRT_Executable* get() const { return executable_; }

 private:
  const Plugin& plugin_;
  PJRT_Executable* executable_ = nullptr;
};

}  // namespace

Executable::Executable(std::shared_ptr<Plugin> plugin, PJRT_LoadedExecutable* executable)
    : plugin_(std::move(plugin)), executable_(executable) {
  // Cached because execute() must size the output lists on every call.
  try {
    CompiledView view(*plugin_, executable_);
    PJRT_Executable_NumOutputs_Args args{};
    args.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
    args.executable = view.get();
    plugin_->call(&PJRT_Api::PJRT_Executable_NumOutputs, &args, "PJRT_Executable_NumOutputs");
    num_outputs_ = args.num_outputs;
  } catch (...) {
    // The destructor does not run for a throwing constructor.
    destroy_loaded(*plugin_, executable_);
    throw;
  }
}

Executable::~Executable() { destroy_loaded(*plugin_, executable_); }

size_t Executable::num_outputs() const { return num_outputs_; }

std::string Executable::name() const {
  CompiledView view(*plugin_, executable_);
  PJRT_Executable_Name_Args args{};
  args.struct_size = PJRT_Executable_Name_Args_STRUCT_SIZE;
  args.executable = view.get();
  plugin_->call(&PJRT_Api::PJRT_Executable_Name, &args, "PJRT_Executable_Name");
  return std::string(args.executable_name, args.executable_name_size);
}

std::string Executable::serialize() const {
  CompiledView view(*plugin_, executable_);
  PJRT_Executable_Serialize_Args args{};
  args.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  args.executable = view.get();
  plugin_->call(&PJRT_Api::PJRT_Executable_Serialize, &args, "PJRT_Executable_Serialize");
  std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
  if (args.serialized_executable_deleter != nullptr) {
    args.serialized_executable_deleter(args.serialized_executable);
  }
  return bytes;
}

ExecuteResult Executable::execute(const std::vector<PJRT_Buffer*>& args, const Device* device,
                                  const std::vector<int64_t>& non_donatable, int launch_id) const {
  return execute(args.data(), args.size(), device, non_donatable.data(), non_donatable.size(),
                 launch_id);
}

ExecuteResult Executable::execute(PJRT_Buffer* const* args, size_t num_args, const Device* device,
                                  const int64_t* non_donatable, size_t num_non_donatable,
                                  int launch_id) const {
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.launch_id = launch_id;
  options.non_donatable_input_indices = non_donatable;
  options.num_non_donatable_input_indices = num_non_donatable;

  // Most programs have a few outputs: their list lives on the stack.
  constexpr size_t kInline = 8;
  PJRT_Buffer* inline_outputs[kInline] = {};
  std::vector<PJRT_Buffer*> heap_outputs;
  PJRT_Buffer** output_list = inline_outputs;
  if (num_outputs_ > kInline) {
    heap_outputs.assign(num_outputs_, nullptr);
    output_list = heap_outputs.data();
  }
  PJRT_Event* done = nullptr;

  PJRT_LoadedExecutable_Execute_Args execute{};
  execute.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  execute.executable = executable_;
  execute.options = &options;
  execute.argument_lists = &args;
  execute.num_devices = 1;
  execute.num_args = num_args;
  execute.output_lists = &output_list;
  execute.device_complete_events = &done;
  execute.execute_device = device != nullptr ? device->raw() : nullptr;
  plugin_->call(&PJRT_Api::PJRT_LoadedExecutable_Execute, &execute,
                "PJRT_LoadedExecutable_Execute");

  ExecuteResult result;
  // Owned from here on, even if an allocation below throws.
  result.done = std::make_unique<Event>(plugin_, done);
  result.outputs.reserve(num_outputs_);
  for (size_t i = 0; i < num_outputs_; ++i) {
    try {
      result.outputs.push_back(std::make_shared<Buffer>(plugin_, output_list[i]));
    } catch (...) {
      for (size_t k = i; k < num_outputs_; ++k) Buffer(plugin_, output_list[k]);
      throw;
    }
  }
  return result;
}

}  // namespace torchtpu::pjrt
