#include "runtime/local_view.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "config/config.h"

namespace torchtpu::runtime {
namespace {

// A launcher's variable (not ours, so not in config's table): unset or empty is nullopt.
std::optional<std::string> launcher_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int non_negative(const char* name, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno != 0 || n < 0 || n > 1 << 20) {
    throw std::invalid_argument(std::string(name) + "='" + value +
                                "' is not valid: expected a non-negative integer");
  }
  return static_cast<int>(n);
}

}  // namespace

PluginKind plugin_kind(const std::string& plugin_path) {
  // The CPU test matches the whole path, as the device count option always has.
  if (plugin_path.find("cpu") != std::string::npos) return PluginKind::kCpu;
  const std::string name = plugin_path.substr(plugin_path.rfind('/') + 1);
  if (name.find("cuda") != std::string::npos || name.find("gpu") != std::string::npos) {
    return PluginKind::kGpu;
  }
  if (name.find("tpu") != std::string::npos) return PluginKind::kTpu;
  return PluginKind::kOther;
}

LocalView local_view_for(const std::string& plugin_path) {
  LocalView view;
  const std::optional<std::string> rank = launcher_env("LOCAL_RANK");
  const std::optional<std::string> world = launcher_env("LOCAL_WORLD_SIZE");
  if (!rank || !world) {
    view.why = "not a multi-process launch (LOCAL_RANK and LOCAL_WORLD_SIZE unset)";
    return view;
  }
  view.local_rank = non_negative("LOCAL_RANK", *rank);
  view.local_world_size = non_negative("LOCAL_WORLD_SIZE", *world);
  if (view.local_world_size <= 1) {
    view.why = "one process on this host (LOCAL_WORLD_SIZE=" + *world + ")";
    return view;
  }
  if (config::choice("TORCHTPU_LOCAL_DEVICES", {"rank", "all"}, "rank") == "all") {
    view.why = "TORCHTPU_LOCAL_DEVICES=all: every device, numbered from 0";
    return view;
  }
  const char* chosen = nullptr;
  switch (plugin_kind(plugin_path)) {
    case PluginKind::kCpu:
      if (config::raw("TORCHTPU_CPU_DEVICE_COUNT")) chosen = "TORCHTPU_CPU_DEVICE_COUNT";
      break;
    case PluginKind::kTpu:
      if (launcher_env("TPU_VISIBLE_CHIPS")) chosen = "TPU_VISIBLE_CHIPS";
      break;
    case PluginKind::kGpu:
      if (launcher_env("CUDA_VISIBLE_DEVICES")) chosen = "CUDA_VISIBLE_DEVICES";
      break;
    case PluginKind::kOther:
      chosen = "an unknown plugin";
      break;
  }
  if (chosen != nullptr) {
    view.why = std::string("devices chosen by ") + chosen + ": numbered from 0";
    return view;
  }
  if (view.local_rank >= view.local_world_size) {
    throw std::invalid_argument("LOCAL_RANK=" + *rank + " is not below LOCAL_WORLD_SIZE=" + *world);
  }
  view.on = true;
  view.why = "LOCAL_RANK=" + *rank + " of LOCAL_WORLD_SIZE=" + *world +
             ": this process opens only its own device(s)";
  return view;
}

}  // namespace torchtpu::runtime
