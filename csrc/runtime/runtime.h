// The process-wide PJRT runtime: one plugin, one client, its devices. Created lazily on first
// device use so that `import torch` never fails because of a missing or broken plugin.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

class Runtime {
 public:
  pjrt::Client& client() { return *client_; }
  // The device torch calls tpu:index; raises for an index out of range or another local rank's
  // device (local_view.h).
  const pjrt::Device& device(int index) const;
  // tpu indices, as torch numbers them: under a multi-process launch the process's own devices
  // sit at LOCAL_RANK*k.. among LOCAL_WORLD_SIZE*k (local_view.h); else all of them, from 0.
  int device_count() const { return device_count_; }
  int first_local_device() const { return first_local_; }
  bool owns_device(int index) const;
  const std::string& platform() const { return platform_; }
  const std::string& plugin_path() const { return plugin_path_; }
  const std::string& compile_options() const { return compile_options_; }
  // The options of a light compile (runtime/compile.h, Effort::kLight).
  const std::string& light_compile_options() const { return light_compile_options_; }
  // The options of a quick compile (Effort::kQuick); empty where the plugin has none (not
  // XLA:CPU) or quick compiles are off.
  const std::string& quick_compile_options() const { return quick_compile_options_; }
  // The options of a quick compile at LLVM optimization level 0 (Effort::kQuickO0); empty when
  // quick compiles or TORCHTPU_QUICK_COMPILE_O0 are off.
  const std::string& quick_o0_compile_options() const { return quick_o0_compile_options_; }

 private:
  friend Runtime& get();
  Runtime() = default;
  std::unique_ptr<pjrt::Client> client_;
  std::string platform_;
  std::string plugin_path_;
  std::string compile_options_;
  std::string light_compile_options_;
  std::string quick_compile_options_;
  std::string quick_o0_compile_options_;
  int first_local_ = 0;
  int device_count_ = 0;
};

// Set by the Python face at import: the plugin path it found, or why it found none.
void configure(const std::string& plugin_path, const std::string& error);
// The runtime, initializing it on first call; throws a c10::Error saying why when unavailable.
Runtime& get();
// Whether a device exists and how many, without creating the runtime (no PJRT client, so no
// device is held) until get() has: the XLA CPU plugin's count is TORCHTPU_CPU_DEVICE_COUNT,
// other plugins' is counted once by a child process (torchtpu/_device_probe). Never throw; 0
// when unavailable. In a bad fork, the parent's count.
bool is_available();
int device_count();
// The first tpu index this process owns (0 unless local_view() is on); without a client.
int first_local_device();
// Why the runtime is unavailable ("" if available or not yet tried).
std::string init_error();
bool is_initialized();

// ---- one PJRT world across processes (docs/distributed.md) ----
// The world this process's client belongs to ("" for a local client), the same string in every
// process of it.
std::string process_world_id();
// Whether configure_process_world succeeded and the client is not made yet.
bool process_world_pending();
// Why this process cannot join a multi-process world at all ("" when it can): XLA:CPU, or
// TORCHTPU_PJRT_WORLD unset. Touches nothing.
std::string process_world_blocker();
// Why processes stage their collectives through the host instead (the plugin's reason).
std::string no_process_world_why();
// Asks that the client, when it is made, join the multi-process world `world_id` through `store`
// (the plugin's key-value store: kept for the client's life) as process `process_index` of
// `process_count`, with the plugin's multi-process options. Returns false, with *why, where it
// cannot: XLA:CPU (no cross-process collectives), TORCHTPU_PJRT_WORLD unset, or the runtime
// already started (its buffers belong to a local client).
bool configure_process_world(std::shared_ptr<pjrt::KvStore> store, const std::string& world_id,
                             int process_index, int process_count, std::string* why);

// TPU_LAUNCH_BLOCKING=1: wait for every execution so errors surface at the op that caused them.
bool launch_blocking();

// The PJRT client's create options for the plugin at `plugin_path`, from the environment
// (TORCHTPU_CPU_DEVICE_COUNT; TORCHTPU_GPU_*). Throws std::invalid_argument for a bad value.
std::map<std::string, pjrt::Attribute> client_options(const std::string& plugin_path);

}  // namespace torchtpu::runtime
