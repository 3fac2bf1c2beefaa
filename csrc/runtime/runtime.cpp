#include "runtime/runtime.h"

#include <c10/util/Exception.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "config/config.h"
#include "pjrt/fork_state.h"
#include "runtime/fork.h"

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

std::map<std::string, pjrt::Attribute> client_options(const std::string& path) {
  std::map<std::string, pjrt::Attribute> options;
  // The XLA CPU plugin exposes one device unless asked for more. One is the default: each
  // extra device keeps its own busy threads, which made single-device work 1.2-1.4x slower with
  // 4 (benchmarks/cpu_device_count.py); multi-device code and tests ask for more with
  // TORCHTPU_CPU_DEVICE_COUNT (the Python tests' conftest asks for 4).
  if (path.find("cpu") != std::string::npos) {
    // Throws std::invalid_argument naming the variable for a bad count ("abc", "-1").
    options["cpu_device_count"] = config::positive_int("TORCHTPU_CPU_DEVICE_COUNT", 1, 4096);
  }
  return options;
}

}  // namespace

void configure(const std::string& plugin_path, const std::string& error) {
  std::lock_guard<std::mutex> g(init_mutex);
  configured_path = plugin_path;
  configured_error = error;
}

const pjrt::Device& Runtime::device(int index) const {
  TORCH_CHECK(index >= 0 && index < device_count(), "Invalid device index tpu:", index,
              ": torchtpu has ", device_count(), " device(s) (valid indices 0..",
              device_count() - 1, ")");
  return *client_->devices()[static_cast<size_t>(index)];
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
        auto plugin = pjrt::Plugin::load(configured_path);
        auto rt = std::unique_ptr<Runtime>(new Runtime());
        rt->client_ = pjrt::Client::create(plugin, client_options(configured_path));
        rt->platform_ = rt->client_->platform_name();
        rt->plugin_path_ = configured_path;
        rt->compile_options_ = pjrt::portable_compile_options();
        instance.store(rt.release(), std::memory_order_release);
        return *instance.load();
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
  }
  TORCH_CHECK(false, "torchtpu: the tpu device is unavailable: ", failure);
}

bool is_available() {
  if (bad_fork.load()) return forked_device_count > 0;
  try {
    return get().device_count() > 0;
  } catch (const std::exception&) {
    return false;
  }
}

std::string init_error() {
  std::lock_guard<std::mutex> g(init_mutex);
  return failure;
}

bool is_initialized() { return instance.load() != nullptr; }

bool in_bad_fork() { return bad_fork.load(); }

int device_count() {
  if (bad_fork.load()) return forked_device_count;
  return is_available() ? get().device_count() : 0;
}

bool launch_blocking() {
  static const bool on = config::flag("TPU_LAUNCH_BLOCKING", false);
  return on;
}

}  // namespace torchtpu::runtime
