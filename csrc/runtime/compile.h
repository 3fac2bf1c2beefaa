// Compiling StableHLO text into a PJRT executable, timed, counted and logged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

class Program {
 public:
  Program(std::unique_ptr<pjrt::Executable> exe, std::string signature)
      : exe_(std::move(exe)), signature_(std::move(signature)) {}
  // Enqueues the program; returns once launched.
  pjrt::ExecuteResult execute(const std::vector<PJRT_Buffer*>& args,
                              const pjrt::Device& device) const;
  pjrt::ExecuteResult execute(PJRT_Buffer* const* args, size_t num_args,
                              const pjrt::Device& device) const;
  const std::string& signature() const { return signature_; }
  pjrt::Executable& executable() const { return *exe_; }

 private:
  std::unique_ptr<pjrt::Executable> exe_;
  std::string signature_;
};

// `signature` names what is compiled (op and argument structure), `why` why it missed the
// cache; both appear in compile errors and in TORCHTPU_LOG_COMPILES=1 lines.
std::shared_ptr<Program> compile_program(const std::string& mlir, const std::string& signature,
                                         const std::string& why);

// TORCHTPU_LOG_COMPILES=1: one stderr line per XLA compile (read once per process).
bool log_compiles();

// The persistent compilation cache's folder, or "" when it is off (TORCHTPU_CACHE=0, no home
// folder, or disabled for this process because the platform cannot reload executables).
std::string disk_cache_dir();

}  // namespace torchtpu::runtime
