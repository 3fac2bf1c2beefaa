// Compiling StableHLO text into a PJRT executable, timed, counted and logged.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

class Program : public std::enable_shared_from_this<Program> {
 public:
  // Shared: signatures whose programs lower to the same module share one executable.
  Program(std::shared_ptr<pjrt::Executable> exe, std::string signature)
      : exe_(std::move(exe)), signature_(std::move(signature)), state_(kReady) {}
  // A program still compiling (compile_program_async), which will have `num_outputs` outputs.
  Program(std::string signature, size_t num_outputs)
      : signature_(std::move(signature)), num_outputs_(num_outputs), state_(kCompiling) {}
  // Enqueues the program; returns once launched. Waits for a compile still in flight. A program
  // compiled for several replicas (compile_options) runs one replica per call, on `device`, and
  // every replica's call passes the same `launch_id` (runtime/collective_world.h).
  pjrt::ExecuteResult execute(const std::vector<PJRT_Buffer*>& args, const pjrt::Device& device,
                              int launch_id = 0) const;
  pjrt::ExecuteResult execute(PJRT_Buffer* const* args, size_t num_args, const pjrt::Device& device,
                              int launch_id = 0) const;
  const std::string& signature() const { return signature_; }
  // Tiered compile: this (light or quick) program's module compiles again at full effort, in the
  // background, once the program has launched light_upgrade_after() times; later launches run
  // the full-effort executable. Called before the program is handed out.
  void upgrade_when_hot(std::string mlir) { upgrade_mlir_ = std::move(mlir); }
  // One atomic load: the launch fast path asks it for every op.
  bool ready() const { return state_.load(std::memory_order_acquire) == kReady; }
  bool failed() const { return state_.load(std::memory_order_acquire) == kFailed; }
  // Blocks until compiled; a failed compile throws its error (c10::Error naming the signature).
  void wait() const;
  size_t num_outputs() const { return ready() ? exe_->num_outputs() : num_outputs_; }
  pjrt::Executable& executable() const { return *exe_; }
  // The disk cache key of this executable (by its module), "" when the disk cache is off.
  const std::string& disk_key() const { return disk_key_; }
  void set_disk_key(std::string key) { disk_key_ = std::move(key); }
  // The compile of a program made by the second constructor ended: exactly one, once.
  void finish(const Program& compiled);
  void fail(std::string error);

 private:
  enum State : int { kCompiling, kReady, kFailed };
  // The executable a launch runs now: exe_, or full_ once upgraded.
  const pjrt::Executable& launched() const;
  void upgrade() const;
  std::shared_ptr<pjrt::Executable> exe_;
  std::string upgrade_mlir_;  // empty: never upgrades
  mutable std::atomic<int64_t> launches_{0};
  mutable std::shared_ptr<pjrt::Executable> full_;  // written once, before upgraded_
  mutable std::atomic<bool> upgraded_{false};
  std::string signature_;
  std::string disk_key_;
  size_t num_outputs_ = 0;
  std::atomic<int> state_;
  std::string error_;  // kFailed
  mutable std::mutex mutex_;
  mutable std::condition_variable done_;
};

// How hard XLA works on a program. Compile time is most of a cold run's time, and an eager op's
// program over a few thousand elements runs in microseconds whatever its code quality: those
// compile light (XLA's backend at a low LLVM optimization level, about half the compile time on
// XLA:CPU) or quick (XLA:CPU's elemental kernel emitters instead of its MLIR fusion emitters,
// which build an MLIR context per compile: 20-35% less compile time, full LLVM optimization and
// the same values wherever nothing is reduced), and quick at LLVM level 0 where no optimization
// can change a value (Effort::kQuickO0: about 40% less than quick again); large and whole-graph
// programs, whose run time matters, compile at full effort. Light and quick programs compile
// again at full effort once hot (Program::upgrade_when_hot), so a loop's steady state runs
// full-effort code.
enum class Effort { kFull, kLight, kQuick, kQuickO0 };
// The rule, in one place: a single eager op's program whose largest array holds at most
// TORCHTPU_LIGHT_COMPILE_MAX_ELEMENTS elements compiles light (TORCHTPU_LIGHT_COMPILE=1), else
// quick when every op of `mlir` is one XLA:CPU's two emitters compute alike (no reduction) and
// the plugin is XLA:CPU (TORCHTPU_QUICK_COMPILE=1, the default), and of those quick at level 0
// when every op rounds once per element and no float product reaches a sum
// (TORCHTPU_QUICK_COMPILE_O0=1, the default); any other program (compiled graphs, large ops,
// custom modules) at full effort.
enum class ProgramClass { kEagerOp, kGraph, kCustom };
Effort effort_for(ProgramClass cls, int64_t largest_elements, const std::string& mlir);
// The xla_backend_optimization_level of light compiles (TORCHTPU_LIGHT_COMPILE_LEVEL), or -1 when
// light compiles are off (TORCHTPU_LIGHT_COMPILE, opt-in).
int light_compile_level();
// Whether quick compiles are on (TORCHTPU_QUICK_COMPILE, on by default; XLA:CPU only: other
// plugins' XLA has no such option and compile these programs at full effort).
bool quick_compile();
// Whether quick programs that level 0 computes alike compile at level 0 (TORCHTPU_QUICK_COMPILE_O0,
// on by default).
bool quick_compile_o0();
// The largest array of an eager op that compiles light or quick
// (TORCHTPU_LIGHT_COMPILE_MAX_ELEMENTS).
int64_t light_compile_max_elements();
// Launches after which a light or quick program compiles again at full effort in the background
// (TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER); 0: they stay as first compiled.
int64_t light_upgrade_after();

// `signature` names what is compiled (op and argument structure), `why` why it missed the
// cache; both appear in compile errors and in TORCHTPU_LOG_COMPILES=1 lines. A module identical
// to one this process already holds (another signature that lowers alike) reuses its executable:
// no compile, no disk read (metrics: programs_shared). `compile_options` (serialized
// xla.CompileOptionsProto) defaults to the runtime's portable single-device options; a program
// with collectives passes pjrt::replicated_compile_options of its devices, which key its
// executable too, so the replicas of one world share one executable (collective_world.h).
// `upgrade`: the full-effort compile of a hot light program (metrics: programs_upgraded, not
// programs_compiled).
std::shared_ptr<Program> compile_program(const std::string& mlir, const std::string& signature,
                                         const std::string& why,
                                         const std::string& compile_options = std::string(),
                                         Effort effort = Effort::kFull, bool upgrade = false);

// Compiles off the critical path: the same as compile_program, but on the compile pool
// (runtime/compile_pool.h); returns at once a Program that launches wait for (aten launches
// queue behind it, runtime/launch_queue.h). Once compiled, records `recipe_metadata` under
// `recipe` (store_recipe) when that key is not empty. Synchronous when async_compile() is off.
std::shared_ptr<Program> compile_program_async(std::string mlir, std::string signature,
                                               std::string why, size_t num_outputs,
                                               std::string recipe, std::string recipe_metadata,
                                               std::string compile_options = std::string(),
                                               Effort effort = Effort::kFull);

// Test hook: the next `n` compiles fail as if XLA had refused them.
void fail_next_compiles(int n);

// TORCHTPU_LOG_COMPILES=1: one stderr line per XLA compile (read once per process).
bool log_compiles();
// Recipes: the disk cache reached from a typed signature instead of a module. A caller records
// what it needs besides the executable to launch a program (argument order, where outputs go,
// device checks) under a key made of its typed signature, the platform, the compile options and
// this build of torchtpu; a later process with the same signature then goes from the signature
// straight to the executable, without lowering, printing or hashing the module.
//
// The key of a typed signature (op or graph structure plus one typed entry per argument, no
// values), or "" when the disk cache is off.
std::string recipe_key(const std::string& typed_signature);
// A recorded program and its caller's metadata; `program` null on a miss (or an entry that does
// not load: the caller then builds as usual and records again).
struct Recipe {
  std::shared_ptr<Program> program;
  std::string metadata;
};
// `name`, when given, names the program in this process (a compiled graph's name differs from
// the recording process's); else the recorded signature does.
Recipe load_recipe(const std::string& key, const std::string& name = std::string());
// Records `program` (compiled or loaded by compile_program, so it has a disk key) under `key`.
void store_recipe(const std::string& key, const Program& program, const std::string& metadata);

// Recipe metadata: length-checked fields, so a damaged entry reads as a miss, never as garbage.
class RecipeWriter {
 public:
  void tag(char c) { out_.push_back(c); }  // one byte (exec::structure_hash's kinds)
  void i64(int64_t v);
  void str(const std::string& s);
  void ints(const std::vector<int64_t>& v);
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};
class RecipeReader {
 public:
  explicit RecipeReader(const std::string& in) : in_(in) {}
  // Throw std::runtime_error past the end.
  int64_t i64();
  std::string str();
  std::vector<int64_t> ints();
  bool at_end() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

// The persistent compilation cache's folder, or "" when it is off (TORCHTPU_CACHE=0, no home
// folder, or disabled for this process because the platform cannot reload executables).
std::string disk_cache_dir();

}  // namespace torchtpu::runtime
