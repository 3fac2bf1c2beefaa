// Thin C++ RAII layer over the PJRT C API (any plugin exporting GetPjrtApi).
// No torch headers here: this layer builds and tests alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "pjrt_c_api.h"  // from the xla-cpu-pjrt wheel (include/), never copied here

namespace torchtpu::pjrt {

class KvStore;  // pjrt/kv_store.h

// Every PJRT failure becomes this exception; what() carries the plugin's message.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int code = -1) : std::runtime_error(message), code_(code) {}
  // PJRT_Error_Code (absl status code) or -1 when raised by this wrapper.
  int code() const { return code_; }
  // True for RESOURCE_EXHAUSTED (device out of memory).
  bool is_out_of_memory() const { return code_ == PJRT_Error_Code_RESOURCE_EXHAUSTED; }

 private:
  int code_;
};

using Attribute = std::variant<std::string, int64_t, std::vector<int64_t>, bool, float>;

// A loaded plugin shared library. Loading the same path twice returns the same Plugin.
class Plugin {
 public:
  // dlopen + GetPjrtApi + version check + PJRT_Plugin_Initialize. Throws Error with a clear
  // message when the file is missing, is not a PJRT plugin (no GetPjrtApi symbol), or its
  // API major version differs / its minor version is older than the header we built against.
  static std::shared_ptr<Plugin> load(const std::string& path);
  // The checks of load() that need no plugin state: the file exists, dlopen succeeds, it
  // exports GetPjrtApi and its API version fits. Neither PJRT_Plugin_Initialize nor any client
  // call runs, so asking whether a device exists holds no device (a TPU's chips can be held by
  // one process only). Returns the plugin's {major, minor} API version; throws what load() would.
  static std::pair<int, int> probe(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const;
  int api_minor() const;
  const std::map<std::string, Attribute>& attributes() const { return attributes_; }

  // Throws Error (with message and code) if err != nullptr, destroying err.
  void check(PJRT_Error* err, const char* what) const;
  // Converts err (non-null) into an Error, destroying err. `what` prefixes the plugin's message
  // unless empty.
  Error to_error(PJRT_Error* err, const char* what) const;

  // Calls one entry of the PJRT_Api table, e.g. call(&PJRT_Api::PJRT_Buffer_Destroy, &args,
  // "PJRT_Buffer_Destroy"). Throws Error if the plugin leaves the entry null or the call fails.
  template <typename Args>
  void call(PJRT_Error* (*PJRT_Api::*entry)(Args*), Args* args, const char* name) const {
    PJRT_Error* (*fn)(Args*) = api_->*entry;
    if (fn == nullptr) throw Error(path_ + " does not implement " + name);
    PJRT_Error* err = nullptr;
    // Some plugins let C++ exceptions escape the C API on bad input (the XLA CPU plugin throws
    // std::bad_variant_access for a create option of the wrong type); callers expect Error.
    try {
      err = fn(args);
    } catch (const std::exception& e) {
      throw Error(std::string(name) + ": plugin threw: " + e.what());
    }
    check(err, name);
  }

 private:
  Plugin() = default;
  void* handle_ = nullptr;
  const PJRT_Api* api_ = nullptr;
  std::string path_;
  std::map<std::string, Attribute> attributes_;
};

class Event {
 public:
  Event(std::shared_ptr<Plugin> plugin, PJRT_Event* event);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  bool is_ready() const;
  // Blocks until ready; throws Error if the event carries an error.
  void await() const;
  // Never blocks: false while pending; true when ready, after throwing Error if it failed. One
  // plugin call fewer than is_ready() then await() (a ready event needs no Await).
  bool poll() const;
  // Callback runs on a plugin thread when ready; the string is empty on success, else the error.
  void on_ready(std::function<void(const std::string& error)> callback);

 private:
  std::shared_ptr<Plugin> plugin_;
  PJRT_Event* event_;
};

struct MemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = -1;  // -1 = not reported by the plugin
  int64_t bytes_limit = -1;
};

class Device {
 public:
  Device(std::shared_ptr<Plugin> plugin, PJRT_Device* device);
  PJRT_Device* raw() const { return device_; }
  int id() const;
  int local_hardware_id() const;
  std::string kind() const;
  std::string debug_string() const;
  // Returns nullopt-like stats with bytes_in_use=-1 when the plugin does not implement it.
  MemoryStats memory_stats() const;
  // Names of the memories addressable by this device (e.g. "device", "pinned_host").
  std::vector<std::string> memory_kinds() const;

 private:
  std::shared_ptr<Plugin> plugin_;
  PJRT_Device* device_;
};

class Buffer {
 public:
  Buffer(std::shared_ptr<Plugin> plugin, PJRT_Buffer* buffer);
  // A buffer whose PJRT buffer does not exist yet: the program producing it is still compiling
  // or waits in a launch queue. It becomes a buffer like any other with resolve(), or carries
  // an error after fail(); until then every accessor below waits, so any reader (host copies,
  // launches, device copies, collectives) sees the data in program order without knowing.
  static std::shared_ptr<Buffer> pending(std::shared_ptr<Plugin> plugin);
  ~Buffer();  // PJRT_Buffer_Destroy
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Waits while pending; throws Error with the producer's message if it failed.
  PJRT_Buffer* raw() const {
    PJRT_Buffer* b = buffer_.load(std::memory_order_acquire);
    return b != nullptr ? b : wait();
  }
  // False while pending (or failed): one atomic load, for the launch fast path.
  bool ready() const { return buffer_.load(std::memory_order_acquire) != nullptr; }
  // Waits up to `ms` milliseconds for a pending buffer; true once resolved or failed.
  bool wait_for(int ms) const;
  // For the producer of a pending buffer, exactly one of them, once.
  void resolve(PJRT_Buffer* buffer);
  void fail(const std::string& error);
  // Gives up ownership of the PJRT buffer (moved into a pending one); this one becomes empty.
  PJRT_Buffer* release() { return buffer_.exchange(nullptr); }
  PJRT_Buffer_Type element_type() const;
  std::vector<int64_t> dimensions() const;
  size_t on_device_size_in_bytes() const;
  PJRT_Device* device() const;
  // Asynchronous device->host copy of the whole buffer into dst (dst_size bytes, must be
  // exactly the dense row-major size). Returns the event to await before reading dst.
  std::unique_ptr<Event> to_host_async(void* dst, size_t dst_size) const;
  // Synchronous convenience: to_host_async + await.
  void to_host(void* dst, size_t dst_size) const;
  std::unique_ptr<Buffer> copy_to_device(const Device& device) const;
  std::unique_ptr<Event> ready_event() const;
  void delete_storage();  // PJRT_Buffer_Delete: frees device memory early
  bool is_deleted() const;

 private:
  struct Pending;
  PJRT_Buffer* wait() const;
  std::shared_ptr<Plugin> plugin_;
  std::atomic<PJRT_Buffer*> buffer_;
  std::unique_ptr<Pending> pending_;  // only for buffers made by pending()
};

struct ExecuteResult {
  // Shared, because a storage's buffer is shared by its aliases; made with make_shared so each
  // output costs one allocation (eager ops launch one program per op).
  std::vector<std::shared_ptr<Buffer>> outputs;
  std::unique_ptr<Event> done;  // ready when the execution completes
};

class Executable {
 public:
  Executable(std::shared_ptr<Plugin> plugin, PJRT_LoadedExecutable* executable);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  PJRT_LoadedExecutable* raw() const { return executable_; }
  size_t num_outputs() const;
  std::string name() const;
  // Serialized executable bytes (PJRT_Executable_Serialize), for a persistent cache.
  std::string serialize() const;
  // Runs on `device` (portable executable, or one replica of a replicated one) with the given
  // arguments. Inputs whose indices are listed in non_donatable stay valid even if the program
  // declares them donated. A replicated program's replicas are launched separately, each with
  // the same non-zero `launch_id`. Returns as soon as the execution is enqueued.
  ExecuteResult execute(const std::vector<PJRT_Buffer*>& args, const Device* device,
                        const std::vector<int64_t>& non_donatable = {}, int launch_id = 0) const;
  // The same without a vector: the eager path keeps its argument list on the stack.
  ExecuteResult execute(PJRT_Buffer* const* args, size_t num_args, const Device* device,
                        const int64_t* non_donatable = nullptr, size_t num_non_donatable = 0,
                        int launch_id = 0) const;

 private:
  std::shared_ptr<Plugin> plugin_;
  PJRT_LoadedExecutable* executable_;
  size_t num_outputs_ = 0;
};

// Host buffer semantics for Client::buffer_from_host.
enum class HostSemantics {
  kCopyDuringCall,  // PJRT copies the data before returning; the caller may free it at once
  kImmutableUntilTransferCompletes,  // caller keeps data alive until the returned event fires
  // The buffer may alias data (XLA:CPU: no copy) and programs may write into it; the caller
  // keeps data alive and unwritten until the returned event fires, which on XLA:CPU is when the
  // buffer is freed. Other plugins treat it as kImmutableUntilTransferCompletes.
  kMutableZeroCopy,
};

class Client {
 public:
  // PJRT_Client_Create with optional create options (key/value).
  // With `kv_store` (kept alive by the caller as long as the client), the plugin may form one
  // multi-process world through it (pjrt/kv_store.h).
  static std::unique_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        const std::map<std::string, Attribute>& options = {},
                                        KvStore* kv_store = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::shared_ptr<Plugin>& plugin() const { return plugin_; }
  PJRT_Client* raw() const { return client_; }
  std::string platform_name() const;
  std::string platform_version() const;
  int process_index() const;
  // Addressable devices in the plugin's order.
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }

  // dims are row-major dense. For kImmutableUntilTransferCompletes and kMutableZeroCopy,
  // *done_with_host receives an event that fires when the host memory may be reused.
  std::unique_ptr<Buffer> buffer_from_host(const void* data, PJRT_Buffer_Type type,
                                           const std::vector<int64_t>& dims, const Device& device,
                                           HostSemantics semantics = HostSemantics::kCopyDuringCall,
                                           std::unique_ptr<Event>* done_with_host = nullptr) const;

  // Compiles a StableHLO module given as MLIR text ("mlir" program format).
  std::unique_ptr<Executable> compile(const std::string& mlir_text,
                                      const std::string& compile_options) const;
  std::unique_ptr<Executable> deserialize(const std::string& serialized,
                                          const std::string& compile_options = "") const;

 private:
  Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client);
  std::shared_ptr<Plugin> plugin_;
  PJRT_Client* client_;
  std::vector<std::unique_ptr<Device>> devices_;
};

// The number of addressable devices a plugin reports, counted by a short-lived child process
// (`helper`: the torchtpu/_device_probe executable, csrc/pjrt/tool/device_probe.cpp) that
// loads the plugin, creates a client, prints the count and exits, so that this process never
// creates a client and the devices are free again when this returns.
struct ChildDeviceCount {
  enum Outcome {
    kCounted,       // count is the plugin's device count
    kClientFailed,  // the plugin did not load or its client failed; error says why
    kProbeFailed,   // the child could not run, crashed or timed out; error says why
  };
  Outcome outcome = kProbeFailed;
  int count = 0;
  std::string error;
};
// Kills the child and reports kProbeFailed after timeout_ms. Uses posix_spawn (no fork
// handlers run, nothing of this process's state is reused by the child).
ChildDeviceCount count_devices_in_child(const std::string& helper, const std::string& plugin_path,
                                        int timeout_ms);

// One of XLA's debug options set for one compile: an entry of CompileOptionsProto's
// env_option_overrides, which the plugin applies over its own defaults (unlike a
// DebugOptionsProto in the build options, which replaces every default). A plugin whose XLA has
// no option of that name refuses the compile.
// Most are booleans; an integer one (xla_backend_optimization_level, the LLVM optimization level
// of XLA:CPU/GPU kernels, which light compiles lower) is made by `integer`.
struct OptionOverride {
  std::string name;  // "xla_gpu_exclude_nondeterministic_ops"
  bool value = true;
  bool is_integer = false;
  int64_t integer_value = 0;
  static OptionOverride integer(std::string name, int64_t value) {
    return OptionOverride{std::move(name), true, true, value};
  }
};

// Serialized xla.CompileOptionsProto: one replica, one partition, portable (so one executable
// can run on any addressable device via execute(..., device)), with `overrides` in order.
// Hand-encoded protobuf wire format, so we need no protobuf dependency.
std::string portable_compile_options(const std::vector<OptionOverride>& overrides = {});
// The same for a program whose collectives (stablehlo.all_reduce, ...) span `device_ids.size()`
// replicas: replica i runs on the device whose global id (Device::id) is device_ids[i]. Not
// portable: each replica is launched on its own device (execute's `device`) with one launch id
// shared by all replicas' launches (the runtime's rendezvous pairs launches by it).
std::string replicated_compile_options(const std::vector<int64_t>& device_ids,
                                       const std::vector<OptionOverride>& overrides = {});

// Bytes per element of a PJRT buffer type (0 for sub-byte / unknown types).
size_t element_size(PJRT_Buffer_Type type);

}  // namespace torchtpu::pjrt
