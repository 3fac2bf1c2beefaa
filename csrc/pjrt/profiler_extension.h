// PJRT's profiler extension (PJRT_Extension_Type_Profiler in the PJRT_Api's extension chain):
// a plugin that has it (libtpu, the XLA GPU plugin) records its device's activity itself, with
// device timestamps, and hands it over as a serialized XSpace (tsl/profiler/protobuf/xplane.proto).
// The XLA CPU plugin has no such extension (its chain holds the layouts, FFI, memory-descriptions
// and phase-compile extensions), so torch.profiler there keeps the host-clock estimates.
//
// The wheel's pjrt_c_api.h has the extension's type tag but not its structs: the layouts below
// are declared from XLA's ABI (xla/pjrt/c/pjrt_c_api_profiler_extension.h, whose struct wraps a
// PLUGIN_Profiler_Api of xla/backends/profiler/plugin/profiler_c_api.h, PLUGIN_PROFILER_VERSION 1),
// and every use checks the plugin's struct_size first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pjrt_c_api.h"

namespace torchtpu::pjrt {

namespace plugin_profiler {  // XLA's PLUGIN_Profiler_* ABI, version 1

struct Profiler;  // opaque
struct Error;     // opaque
struct ErrorDestroyArgs {
  size_t struct_size;
  void* priv;
  Error* error;
};
struct ErrorMessageArgs {
  size_t struct_size;
  void* priv;
  const Error* error;
  const char* message;  // out
  size_t message_size;  // out
};
struct ErrorGetCodeArgs {
  size_t struct_size;
  void* priv;
  const Error* error;
  int code;  // out
};
struct CreateArgs {
  size_t struct_size;
  const char* options;  // a serialized tensorflow.ProfileOptions; empty: the plugin's defaults
  size_t options_size;
  Profiler* profiler;  // out
};
struct ProfilerArgs {  // Destroy, Start and Stop take the same arguments
  size_t struct_size;
  Profiler* profiler;
};
struct CollectDataArgs {
  size_t struct_size;
  Profiler* profiler;
  uint8_t* buffer;              // null: the call sets buffer_size_in_bytes; else filled
  size_t buffer_size_in_bytes;  // out
};
struct Api {
  size_t struct_size;
  void* priv;
  void (*error_destroy)(ErrorDestroyArgs*);
  void (*error_message)(ErrorMessageArgs*);
  Error* (*error_get_code)(ErrorGetCodeArgs*);
  Error* (*create)(CreateArgs*);
  Error* (*destroy)(ProfilerArgs*);
  Error* (*start)(ProfilerArgs*);
  Error* (*stop)(ProfilerArgs*);
  Error* (*collect_data)(CollectDataArgs*);
};

}  // namespace plugin_profiler

// PJRT_Profiler_Extension: the extension header, then the plugin's profiler api.
struct ProfilerExtension {
  PJRT_Extension_Base base;
  plugin_profiler::Api* profiler_api;
  int64_t traceme_context_id;  // only when the extension is passed as call arguments
};

// The profiler api in the extension chain starting at `first` (PJRT_Api::extension_start), or
// null: no profiler extension, or one whose struct (or api) is too small for what we call.
const plugin_profiler::Api* find_profiler_api(const PJRT_Extension_Base* first);
// The extension types in the chain, in order (what a plugin offers, for diagnostics).
std::vector<int> extension_types(const PJRT_Extension_Base* first);

// One device-profiling session of a plugin: created and started by start(), stopped and its
// XSpace collected by stop_and_collect(). Throws pjrt::Error with the plugin's message.
class DeviceProfiler {
 public:
  explicit DeviceProfiler(const plugin_profiler::Api* api);
  ~DeviceProfiler();
  DeviceProfiler(const DeviceProfiler&) = delete;
  DeviceProfiler& operator=(const DeviceProfiler&) = delete;
  void start();
  std::string stop_and_collect();  // the serialized XSpace

 private:
  void check(plugin_profiler::Error* err, const char* what) const;
  const plugin_profiler::Api* api_;
  plugin_profiler::Profiler* profiler_ = nullptr;
  bool started_ = false;
};

// The device events of a serialized XSpace: each event of each line of the planes whose name
// starts with "/device:" (XLA's GPU and TPU planes), in the host clock's nanoseconds
// (line timestamp_ns + event offset_ps / 1000). A malformed buffer throws pjrt::Error.
struct DeviceEvent {
  std::string plane;  // "/device:GPU:0"
  std::string line;   // "XLA Modules", "XLA Ops", a stream...
  std::string name;   // the event metadata's display name, else its name
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
};
std::vector<DeviceEvent> device_events(const std::string& xspace);

}  // namespace torchtpu::pjrt
