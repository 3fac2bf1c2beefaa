#include "runtime/runtime.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "config/config.h"
#include "pjrt/fork_state.h"
#include "pjrt/kv_store.h"
#include "pjrt/process_options.h"
#include "runtime/compile.h"
#include "runtime/fork.h"
#include "runtime/local_view.h"

namespace torchtpu::runtime {
namespace {

std::mutex init_mutex;
std::string configured_path;
std::string configured_error = "torchtpu was not configured with a PJRT plugin";
// Published once and never destroyed: device buffers may outlive Python-level teardown.
std::atomic<Runtime*> instance{nullptr};
std::string failure;
bool tried = false;

// fork() copies the runtime's memory but not the plugin's threads, so a child that used it
// would wait forever on an event no thread will complete. The child instead forgets the
// runtime and raises PyTorch's bad-fork error on use, as CUDA does.
std::atomic<bool> bad_fork{false};
int forked_device_count = 0;

void forget_runtime_in_child() {
  Runtime* rt = instance.load();
  if (rt == nullptr) return;                 // never initialized: the child may initialize its own
  forked_device_count = rt->device_count();  // a cached list: no plugin call
  pjrt::mark_forked_child();
  bad_fork.store(true);
  instance.store(nullptr);
}

const bool atfork_registered = [] {
  return pthread_atfork(nullptr, nullptr, forget_runtime_in_child) == 0;
}();

// Whether the configured plugin is the XLA CPU plugin, whose device count is a create option.
bool is_cpu_plugin(const std::string& path) { return plugin_kind(path) == PluginKind::kCpu; }

// The XLA GPU plugin (xla_cuda_plugin.so from JAX's jax-cuda*-pjrt, xla-cuda13-pjrt's).
bool is_gpu_plugin(const std::string& path) { return plugin_kind(path) == PluginKind::kGpu; }

// The multi-process world asked for before the client was made (configure_process_world).
struct ProcessWorld {
  std::shared_ptr<pjrt::KvStore> store;
  std::string id;
  int process_index = 0;
  int process_count = 1;
};
ProcessWorld process_world;  // guarded by init_mutex
std::string joined_world;    // set once the client was made in a world

// The local view (local_view.h), computed once per configured plugin.
std::mutex view_mutex;
// Replaced only by configure(), never freed: callers hold references.
LocalView* view = nullptr;
std::string view_error;

// libtpu reads its process layout from the environment when a client is made, here or in the
// probe child: one chip per local rank, as torch_xla sets it, where the user has not. One host
// (NODE_RANK/torchrun's multi-node layout needs the hosts' addresses: set the variables yourself).
void set_tpu_process_env(const LocalView& v) {
  pjrt::ProcessPlace place;
  place.local_rank = v.local_rank;
  place.local_world_size = v.local_world_size;
  for (const auto& [name, value] : pjrt::tpu_process_env(
           place, pjrt::default_host_chip_bounds(v.local_world_size), {"localhost"})) {
    setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  }
}

// Set when creating the runtime failed: the device is then unavailable for good, whatever a
// probe said.
std::atomic<bool> init_failed{false};

// Answers to "is there a device, how many" before the runtime exists, found without creating a
// PJRT client: creating one holds the devices (libtpu lets one process hold a host's chips;
// XLA:GPU preallocates most GPU memory), and the processes that only ask (a launcher, an
// engine's parent, a Ray driver) must leave them to the processes they start. Computed once.
std::mutex probe_mutex;
bool probed = false;
int probed_count = 0;  // -1: no answer without a client (the probe could not run)

// torchtpu/_device_probe, installed next to this extension.
std::string probe_helper_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&probe_helper_path), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/_device_probe";
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

// How long a child may take to create a client and count: libtpu's start takes seconds, up to
// tens on a large host. Past this the child is killed and the count comes from a client here.
constexpr int kProbeTimeoutMs = 120 * 1000;

int probe_device_count() {
  std::string path;
  {
    std::lock_guard<std::mutex> g(init_mutex);
    path = configured_path;
  }
  if (path.empty()) return 0;  // no plugin found: get() raises the reason on use
  try {
    // dlopen + GetPjrtApi + version check; no plugin initialization, no client.
    pjrt::Plugin::probe(path);
    if (local_view().on && plugin_kind(path) == PluginKind::kTpu) set_tpu_process_env(local_view());
  } catch (const std::exception&) {
    return 0;  // get() raises the same error on use
  }
  if (is_cpu_plugin(path)) {
    // The XLA CPU plugin makes exactly the devices it is asked for, so the configured count is
    // the answer; a bad value makes the device unavailable, as creating the client would.
    try {
      return static_cast<int>(config::positive_int("TORCHTPU_CPU_DEVICE_COUNT", 1, 4096));
    } catch (const std::exception&) {
      return 0;
    }
  }
  // Other plugins learn their devices only from a client (the PJRT C API has no client-free
  // device query), so a short-lived child process creates one, counts and exits; it sees this
  // process's environment (TPU_VISIBLE_CHIPS, CUDA_VISIBLE_DEVICES, ...) and so the same
  // devices. A child that cannot run, crashes or hangs gives no answer: the count then comes
  // from a client here, as before, rather than a wrong "no device".
  const std::string helper = probe_helper_path();
  if (helper.empty()) return -1;
  const pjrt::ChildDeviceCount counted =
      pjrt::count_devices_in_child(helper, path, kProbeTimeoutMs);
  switch (counted.outcome) {
    case pjrt::ChildDeviceCount::kCounted:
      return counted.count;
    case pjrt::ChildDeviceCount::kClientFailed:
      // The plugin cannot make a client in this environment: unavailable. Not cached as an
      // init failure: get() tries again on use and raises the plugin's own error.
      return 0;
    case pjrt::ChildDeviceCount::kProbeFailed:
      break;
  }
  return -1;
}

// The device count known without creating a client, or -1 when there is none (the process's
// own devices: local_view() multiplies).
int count_without_client() {
  std::lock_guard<std::mutex> g(probe_mutex);
  if (!probed) {
    probed_count = probe_device_count();
    probed = true;
  }
  return probed_count;
}

}  // namespace

std::map<std::string, pjrt::Attribute> client_options(const std::string& path) {
  std::map<std::string, pjrt::Attribute> options;
  // The XLA CPU plugin exposes one device unless asked for more. One is the default: each
  // extra device keeps its own busy threads, which made single-device work 1.2-1.4x slower with
  // 4 (benchmarks/cpu_device_count.py); multi-device code and tests ask for more with
  // TORCHTPU_CPU_DEVICE_COUNT (the Python tests' conftest asks for 4).
  if (is_cpu_plugin(path)) {
    // Throws std::invalid_argument naming the variable for a bad count ("abc", "-1").
    options["cpu_device_count"] = config::positive_int("TORCHTPU_CPU_DEVICE_COUNT", 1, 4096);
  }
  const LocalView& v = local_view();
  if (v.on && is_gpu_plugin(path)) {
    pjrt::ProcessPlace place;
    place.local_rank = v.local_rank;
    place.local_world_size = v.local_world_size;
    for (auto& [name, value] : pjrt::gpu_process_options(place, {v.local_rank}, false)) {
      options[name] = value;
    }
  }
  if (is_gpu_plugin(path)) {
    // The GPU client reserves 75% of GPU memory when it starts unless told not to (JAX's
    // default, XLA_PYTHON_CLIENT_PREALLOCATE): PyTorch code that also uses CUDA, or a second
    // process on the GPU, would find it gone. torchtpu's default grows on demand (the BFC
    // allocator up to the memory fraction); TORCHTPU_GPU_PREALLOCATE=1 restores the reservation.
    options["preallocate"] = config::flag("TORCHTPU_GPU_PREALLOCATE", false);
    if (config::raw("TORCHTPU_GPU_MEMORY_FRACTION")) {
      options["memory_fraction"] =
          static_cast<float>(config::fraction("TORCHTPU_GPU_MEMORY_FRACTION", 0.75));
    }
    if (config::raw("TORCHTPU_GPU_ALLOCATOR")) {
      options["allocator"] = config::choice("TORCHTPU_GPU_ALLOCATOR",
                                            {"default", "bfc", "platform", "cuda_async"}, "");
    }
  }
  return options;
}

void configure(const std::string& plugin_path, const std::string& error) {
  {
    std::lock_guard<std::mutex> g(init_mutex);
    configured_path = plugin_path;
    configured_error = error;
  }
  {
    // The launcher's environment is set before the process starts, so reading it here, at import,
    // is reading it at the first use.
    std::lock_guard<std::mutex> g(view_mutex);
    view_error.clear();
    try {
      view = new LocalView(local_view_for(plugin_path));
    } catch (const std::exception& e) {
      // A malformed LOCAL_RANK: every device numbered from 0, and get() raises why.
      view = new LocalView();
      view->why = e.what();
      view_error = e.what();
    }
  }
  // A new plugin path invalidates a count probed for the old one.
  std::lock_guard<std::mutex> g(probe_mutex);
  probed = false;
}

const LocalView& local_view() {
  static const LocalView unconfigured;
  std::lock_guard<std::mutex> g(view_mutex);
  return view ? *view : unconfigured;
}

int first_local_device() {
  const LocalView& v = local_view();
  if (!v.on) return 0;
  if (Runtime* rt = instance.load(std::memory_order_acquire)) return rt->first_local_device();
  const int own = count_without_client();
  return own > 0 ? v.local_rank * own : v.local_rank;
}

bool Runtime::owns_device(int index) const {
  return index >= first_local_ &&
         index < first_local_ + static_cast<int>(client_->devices().size());
}

const pjrt::Device& Runtime::device(int index) const {
  TORCH_CHECK(index >= 0 && index < device_count(), "Invalid device index tpu:", index,
              ": torchtpu has ", device_count(), " device(s) (valid indices 0..",
              device_count() - 1, ")");
  TORCH_CHECK(owns_device(index), "tpu:", index,
              " is the device of another process on this host: ", local_view().why,
              ", which are tpu:", first_local_, "..",
              first_local_ + static_cast<int>(client_->devices().size()) - 1,
              " (torch.tpu.set_device(int(os.environ[\"LOCAL_RANK\"])); TORCHTPU_LOCAL_DEVICES=all "
              "opens every device in each process)");
  return *client_->devices()[static_cast<size_t>(index - first_local_)];
}

Runtime& get() {
  if (Runtime* rt = instance.load(std::memory_order_acquire)) return *rt;
  TORCH_CHECK(!bad_fork.load(), pjrt::forked_child_message());
  std::lock_guard<std::mutex> g(init_mutex);
  if (Runtime* rt = instance.load()) return *rt;
  if (!tried) {
    tried = true;
    if (configured_path.empty()) {
      failure = configured_error;
    } else {
      try {
        const LocalView& v = local_view();
        {
          std::lock_guard<std::mutex> g2(view_mutex);
          TORCH_CHECK(view_error.empty(), view_error);
        }
        auto plugin = pjrt::Plugin::load(configured_path);
        if (v.on && plugin_kind(configured_path) == PluginKind::kTpu) set_tpu_process_env(v);
        auto rt = std::unique_ptr<Runtime>(new Runtime());
        std::map<std::string, pjrt::Attribute> options = client_options(configured_path);
        if (process_world.store && is_gpu_plugin(configured_path)) {
          // XLA:GPU exchanges its topology through the store: this process is node
          // process_index of process_count.
          options["node_id"] = static_cast<int64_t>(process_world.process_index);
          options["num_nodes"] = static_cast<int64_t>(process_world.process_count);
        }
        rt->client_ = pjrt::Client::create(plugin, options, process_world.store.get());
        if (process_world.store) joined_world = process_world.id;
        const int own = static_cast<int>(rt->client_->devices().size());
        rt->first_local_ = v.on ? v.local_rank * own : 0;
        rt->device_count_ = v.on ? v.local_world_size * own : own;
        rt->platform_ = rt->client_->platform_name();
        rt->plugin_path_ = configured_path;
        rt->compile_options_ = pjrt::portable_compile_options();
        const int level = light_compile_level();
        rt->light_compile_options_ =
            level < 0 ? rt->compile_options_
                      : pjrt::portable_compile_options({pjrt::OptionOverride::integer(
                            "xla_backend_optimization_level", level)});
        // XLA:CPU's option: the CPU plugin reports platform "cpu" (other plugins refuse it).
        if (quick_compile() && rt->platform_ == "cpu") {
          rt->quick_compile_options_ =
              pjrt::portable_compile_options({{"xla_cpu_use_fusion_emitters", false}});
          if (quick_compile_o0()) {
            rt->quick_o0_compile_options_ = pjrt::portable_compile_options(
                {{"xla_cpu_use_fusion_emitters", false},
                 pjrt::OptionOverride::integer("xla_backend_optimization_level", 0)});
          }
        }
        instance.store(rt.release(), std::memory_order_release);
        return *instance.load();
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    init_failed.store(true);
  }
  TORCH_CHECK(false, "torchtpu: the tpu device is unavailable: ", failure);
}

bool is_available() { return device_count() > 0; }

std::string process_world_id() {
  std::lock_guard<std::mutex> g(init_mutex);
  return joined_world;
}

namespace {
// Why this process cannot be (or is not) one world with others; "" when it can.
std::string world_blocker(const std::string& path) {
  if (is_cpu_plugin(path)) {
    return "the XLA CPU plugin has no cross-process collectives";
  }
  if (!config::flag("TORCHTPU_PJRT_WORLD", false)) {
    return "one PJRT world across processes is off (TORCHTPU_PJRT_WORLD=1 turns it on for TPU "
           "and GPU plugins; not yet run on hardware)";
  }
  return "";
}
}  // namespace

bool process_world_pending() {
  std::lock_guard<std::mutex> g(init_mutex);
  return process_world.store != nullptr && instance.load() == nullptr;
}

std::string process_world_blocker() {
  std::lock_guard<std::mutex> g(init_mutex);
  return world_blocker(configured_path);
}

std::string no_process_world_why() {
  std::lock_guard<std::mutex> g(init_mutex);
  const std::string blocker = world_blocker(configured_path);
  if (!blocker.empty()) return blocker;
  if (instance.load() != nullptr && joined_world.empty()) {
    return "the tpu runtime started before init_process_group, with a client of this process "
           "alone (set the device and call init_process_group before using tpu)";
  }
  return "the ranks are in different PJRT worlds";
}

bool configure_process_world(std::shared_ptr<pjrt::KvStore> store, const std::string& world_id,
                             int process_index, int process_count, std::string* why) {
  std::lock_guard<std::mutex> g(init_mutex);
  *why = world_blocker(configured_path);
  if (!why->empty()) return false;
  if (instance.load() != nullptr || tried) {
    if (joined_world == world_id) return true;
    *why =
        "the tpu runtime started before init_process_group, with a client of this process "
        "alone (set the device and call init_process_group before using tpu)";
    return false;
  }
  process_world.store = std::move(store);
  process_world.id = world_id;
  process_world.process_index = process_index;
  process_world.process_count = process_count;
  return true;
}

std::string init_error() {
  std::lock_guard<std::mutex> g(init_mutex);
  return failure;
}

bool is_initialized() { return instance.load() != nullptr; }

bool in_bad_fork() { return bad_fork.load(); }

int device_count() {
  if (bad_fork.load()) return forked_device_count;
  // Once the runtime exists (or failed to start), it answers.
  if (Runtime* rt = instance.load(std::memory_order_acquire)) return rt->device_count();
  if (init_failed.load()) return 0;
  const int count = count_without_client();
  if (count >= 0) return local_view().on ? count * local_view().local_world_size : count;
  try {
    return get().device_count();
  } catch (const std::exception&) {
    return 0;
  }
}

bool launch_blocking() {
  static const bool on = config::flag("TPU_LAUNCH_BLOCKING", false);
  return on;
}

}  // namespace torchtpu::runtime
