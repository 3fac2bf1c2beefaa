#include "runtime/compile.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::runtime {
namespace {

bool log_compiles() {
  static const bool on = [] {
    const char* v = std::getenv("TORCHTPU_LOG_COMPILES");
    return v && std::string(v) != "0";
  }();
  return on;
}

bool dump_mlir() {
  static const bool on = [] {
    const char* v = std::getenv("TORCHTPU_DUMP_MLIR");
    return v && std::string(v) != "0";
  }();
  return on;
}

}  // namespace

pjrt::ExecuteResult Program::execute(const std::vector<PJRT_Buffer*>& args,
                                     const pjrt::Device& device) const {
  try {
    return exe_->execute(args, &device);
  } catch (const pjrt::Error& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, !e.is_out_of_memory(), "torchtpu: out of device memory ",
                     "running ", signature_, ": ", e.what());
    TORCH_CHECK(false, "torchtpu: launching ", signature_, " failed: ", e.what());
  }
}

std::shared_ptr<Program> compile_program(const std::string& mlir, const std::string& signature,
                                         const std::string& why) {
  Runtime& rt = get();
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<pjrt::Executable> exe;
  try {
    exe = rt.client().compile(mlir, rt.compile_options());
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "torchtpu: XLA failed to compile ", signature, ": ", e.what(),
                dump_mlir() ? "\n" + mlir : std::string("\n(TORCHTPU_DUMP_MLIR=1 shows the module)"));
  }
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now() - start)
                .count();
  metrics().programs_compiled++;
  metrics().compile_ns += ns;
  if (log_compiles()) {
    std::fprintf(stderr, "torchtpu: compiled %s in %.1f ms (%s)\n", signature.c_str(), ns / 1e6,
                 why.c_str());
  }
  if (dump_mlir()) std::fprintf(stderr, "%s\n", mlir.c_str());
  return std::make_shared<Program>(std::move(exe), signature);
}

}  // namespace torchtpu::runtime
