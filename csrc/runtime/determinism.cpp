#include "runtime/determinism.h"

#include <cstdio>
#include <memory>
#include <mutex>

#include "runtime/compile.h"
#include "runtime/plugin_log.h"
#include "runtime/runtime.h"

namespace torchtpu::runtime {
namespace {

// An identity over one f32: the cheapest module a plugin still compiles with the options.
constexpr const char* kProbeModule =
    "module @determinism_probe {\n"
    "  func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n"
    "    return %a : tensor<f32>\n"
    "  }\n"
    "}\n";

std::mutex plan_mutex;
// Guarded by plan_mutex. Every plan decided stays allocated (the test hook decides again), so a
// reference handed out never dangles.
std::vector<std::unique_ptr<DeterminismPlan>> plans;
bool plan_current = false;
std::string test_platform;
std::vector<std::string> test_names;

// Platforms whose executables XLA compiles deterministic without being asked.
bool deterministic_by_default(const std::string& platform) {
  return platform != "cuda" && platform != "rocm" && platform != "gpu";
}

DeterminismPlan decide() {
  Runtime& rt = get();
  DeterminismPlan p;
  p.platform = test_platform.empty() ? rt.platform() : test_platform;
  if (deterministic_by_default(p.platform)) {
    p.route = DeterminismRoute::kNative;
    if (log_compiles()) {
      std::fprintf(stderr,
                   "torchtpu: torch.use_deterministic_algorithms(True) on %s: its programs are "
                   "deterministic as compiled; no compile option is sent\n",
                   p.platform.c_str());
    }
    return p;
  }
  const std::vector<std::string>& names =
      test_names.empty() ? deterministic_option_names() : test_names;
  std::string refused;
  for (const std::string& name : names) {
    try {
      without_plugin_log_on_failure([&] {
        rt.client().compile(kProbeModule, pjrt::portable_compile_options({{name, true}}));
      });
      p.route = DeterminismRoute::kCompileOption;
      p.option = name;
      if (log_compiles()) {
        std::fprintf(stderr,
                     "torchtpu: torch.use_deterministic_algorithms(True) on %s: programs are "
                     "compiled with XLA's %s\n",
                     p.platform.c_str(), name.c_str());
      }
      return p;
    } catch (const pjrt::Error& e) {
      refused += (refused.empty() ? "" : "; ") + name;
    }
  }
  p.route = DeterminismRoute::kUnavailable;
  std::fprintf(stderr,
               "torchtpu: torch.use_deterministic_algorithms(True) on %s: the plugin accepts none "
               "of XLA's deterministic-ops options (%s); programs with floating-point "
               "scatter-adds raise instead\n",
               p.platform.c_str(), refused.c_str());
  return p;
}

}  // namespace

const std::vector<std::string>& deterministic_option_names() {
  static const std::vector<std::string> names = {"xla_gpu_exclude_nondeterministic_ops",
                                                 "xla_gpu_deterministic_ops"};
  return names;
}

const DeterminismPlan& determinism_plan() {
  std::lock_guard<std::mutex> g(plan_mutex);
  if (!plan_current) {
    plans.push_back(std::make_unique<DeterminismPlan>(decide()));
    plan_current = true;
  }
  return *plans.back();
}

std::vector<pjrt::OptionOverride> deterministic_overrides() {
  const DeterminismPlan& p = determinism_plan();
  if (p.route != DeterminismRoute::kCompileOption) return {};
  return {{p.option, true}};
}

void set_determinism_test_platform(const std::string& platform, std::vector<std::string> names) {
  std::lock_guard<std::mutex> g(plan_mutex);
  test_platform = platform;
  test_names = std::move(names);
  plan_current = false;
}

}  // namespace torchtpu::runtime
