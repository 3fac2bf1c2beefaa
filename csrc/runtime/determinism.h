// torch.use_deterministic_algorithms(True) on an XLA platform. XLA:CPU and TPU programs are
// deterministic as compiled. XLA:GPU runs floating-point scatter-adds (index_add_, scatter_add_,
// index_put_(accumulate=True), embedding backward...) with atomics, and may pick
// nondeterministic kernels; XLA's deterministic-ops debug option makes the whole executable
// deterministic. It travels as a CompileOptionsProto env_option_override (pjrt::OptionOverride),
// never as a DebugOptionsProto, which would replace every other default of the plugin.
#pragma once

#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

enum class DeterminismRoute {
  kNative,         // the platform's programs are deterministic already (cpu, tpu): nothing sent
  kCompileOption,  // XLA's deterministic-ops option, named `option`, is sent with each compile
  kUnavailable,    // the platform needs the option and its plugin knows none of the names:
                   // programs with nondeterministic ops raise (warn under warn_only) as CUDA's
};

struct DeterminismPlan {
  DeterminismRoute route = DeterminismRoute::kNative;
  std::string platform;  // the platform the plan is for
  std::string option;    // kCompileOption: the option's name
};

// The plan for this process's platform, decided once (on cuda by compiling a one-op module with
// each name XLA has had, newest first, until the plugin accepts one).
const DeterminismPlan& determinism_plan();

// The compile option overrides of a program built under torch.use_deterministic_algorithms(True):
// the option of a kCompileOption plan, else none.
std::vector<pjrt::OptionOverride> deterministic_overrides();

// XLA's names for the option, newest first: xla_gpu_exclude_nondeterministic_ops (deterministic
// executables, autotuning left alone), then xla_gpu_deterministic_ops (older plugins; also makes
// autotuning deterministic).
const std::vector<std::string>& deterministic_option_names();

// Test hook: plan as if the runtime's platform were `platform` ("" for the real one) and probe
// `names` instead of XLA's (empty: XLA's); the next determinism_plan() decides again.
void set_determinism_test_platform(const std::string& platform, std::vector<std::string> names);

}  // namespace torchtpu::runtime
