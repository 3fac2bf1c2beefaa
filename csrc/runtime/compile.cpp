#include "runtime/compile.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "config/config.h"
#include "runtime/compile_pool.h"
#include "runtime/disk_cache.h"
#include "runtime/metrics.h"
#include "runtime/plugin_log.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace torchtpu::runtime {
namespace {

bool dump_mlir() {
  static const bool on = config::flag("TORCHTPU_DUMP_MLIR", false);
  return on;
}

// At most one line of a plugin message, and not an endless one.
std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  constexpr size_t kMax = 200;
  return line.size() > kMax ? line.substr(0, kMax) + "..." : line;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

DiskCache& disk_cache() {
  static DiskCache cache = DiskCache::from_environment();
  return cache;
}

const std::string& fingerprint(Runtime& rt) {
  static const std::string f = platform_fingerprint(rt.client());
  return f;
}

// Set once this process has reloaded one of its own serialized executables: from then on a
// reload failure means a bad entry, not a platform that cannot reload at all.
std::atomic<bool> reload_verified{false};

void refuse_reload(Runtime& rt, const std::string& why) {
  disk_cache().disable();
  static std::once_flag logged;
  std::call_once(logged, [&] {
    std::fprintf(stderr,
                 "torchtpu: this PJRT platform cannot reload serialized executables (%s: %s); the "
                 "disk cache is disabled for this process\n",
                 rt.platform().c_str(), why.c_str());
  });
}

// Serializes a freshly compiled executable into the disk cache. The first time in a process it
// also reloads the bytes, so a platform that cannot reload is found before any entry is written.
void store_in_disk_cache(Runtime& rt, const std::string& key, const pjrt::Executable& exe) {
  std::string bytes;
  try {
    bytes = exe.serialize();
    if (!reload_verified.load()) {
      rt.client().deserialize(bytes);
      reload_verified.store(true);
    }
  } catch (const pjrt::Error& e) {
    metrics().disk_cache_load_failures++;
    refuse_reload(rt, e.what());
    return;
  }
  DiskCache::StoreResult r = disk_cache().store(key, bytes);
  if (r.written) metrics().disk_cache_writes++;
  metrics().disk_cache_evictions += r.evicted;
  if (!r.written && !r.error.empty()) {
    // Reading may still work (a shared read-only cache), so only say it once and go on.
    static std::once_flag logged;
    std::call_once(logged, [&] {
      std::fprintf(stderr, "torchtpu: not writing the compilation cache: %s\n", r.error.c_str());
    });
  }
}

// Executables by module key, so that signatures lowering to the same module (an op on a
// contiguous view and on its base, a cast both ways round) compile or load it once per process.
// Weak: an executable lives as long as a program cache holds a Program using it. Expired
// entries are swept when the table doubles, so it stays within a small multiple of the caches.
class SharedModules {
 public:
  std::shared_ptr<pjrt::Executable> find(const std::string& key) {
    std::lock_guard<std::mutex> g(mutex_);
    auto it = table_.find(key);
    if (it == table_.end()) return nullptr;
    std::shared_ptr<pjrt::Executable> exe = it->second.lock();
    if (!exe) table_.erase(it);
    return exe;
  }
  // The executable of `key` if held; while another thread compiles or loads that module, waits
  // for it (signatures racing to one module compile it once, also on the compile pool). Null:
  // the caller builds it and then calls add() or abandon().
  std::shared_ptr<pjrt::Executable> claim(const std::string& key) {
    std::unique_lock<std::mutex> lk(mutex_);
    for (;;) {
      auto it = table_.find(key);
      if (it != table_.end()) {
        if (std::shared_ptr<pjrt::Executable> exe = it->second.lock()) return exe;
        table_.erase(it);
      }
      if (building_.insert(key).second) return nullptr;
      built_.wait(lk);
    }
  }
  void abandon(const std::string& key) {
    std::lock_guard<std::mutex> g(mutex_);
    building_.erase(key);
    built_.notify_all();
  }
  void add(const std::string& key, const std::shared_ptr<pjrt::Executable>& exe) {
    std::lock_guard<std::mutex> g(mutex_);
    if (building_.erase(key) != 0) built_.notify_all();
    table_[key] = exe;
    if (table_.size() < sweep_at_) return;
    for (auto it = table_.begin(); it != table_.end();) {
      it = it->second.expired() ? table_.erase(it) : std::next(it);
    }
    sweep_at_ = std::max<size_t>(kMinSweep, 2 * table_.size());
  }

 private:
  static constexpr size_t kMinSweep = 1024;
  std::mutex mutex_;
  std::condition_variable built_;
  std::unordered_map<std::string, std::weak_ptr<pjrt::Executable>> table_;
  std::unordered_set<std::string> building_;
  size_t sweep_at_ = kMinSweep;
};

// fail_next_compiles: compiles left to fail.
std::atomic<int> injected_failures{0};

bool take_injected_failure() {
  int n = injected_failures.load();
  while (n > 0 && !injected_failures.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}

std::string injected_failure(const std::string& signature) {
  return "torchtpu: XLA failed to compile " + signature +
         ": injected failure (torchtpu._C._fail_next_compiles)";
}

SharedModules& shared_modules() {
  static SharedModules* table = new SharedModules();  // never destroyed: used at exit
  return *table;
}

// The torch index of a device, for the profiler's tpu track.
int index_of(const pjrt::Device& device) {
  Runtime& rt = get();
  for (int i = 0; i < rt.device_count(); ++i) {
    if (rt.owns_device(i) && &rt.device(i) == &device) return i;
  }
  return -1;
}

}  // namespace

bool log_compiles() {
  static const bool on = config::flag("TORCHTPU_LOG_COMPILES", false);
  return on;
}

std::string disk_cache_dir() {
  DiskCache& c = disk_cache();
  return c.enabled() ? c.dir() : std::string();
}

pjrt::ExecuteResult Program::execute(const std::vector<PJRT_Buffer*>& args,
                                     const pjrt::Device& device, int launch_id) const {
  return execute(args.data(), args.size(), device, launch_id);
}

const pjrt::Executable& Program::launched() const {
  if (upgrade_mlir_.empty()) return *exe_;
  if (upgraded_.load(std::memory_order_acquire)) return *full_;
  if (launches_.fetch_add(1, std::memory_order_relaxed) + 1 == light_upgrade_after()) upgrade();
  return *exe_;
}

void Program::upgrade() const {
  // Hot: the same module at full effort, when the pool has nothing else to do. A failure keeps
  // the light or quick executable, which computes the same values.
  submit_background_compile([self = shared_from_this()] {
    try {
      std::shared_ptr<Program> full = compile_program(
          self->upgrade_mlir_, self->signature_,
          "launched " + std::to_string(light_upgrade_after()) + " times: upgrading to full effort",
          std::string(), Effort::kFull, /*upgrade=*/true);
      self->full_ = full->exe_;
      self->upgraded_.store(true, std::memory_order_release);
    } catch (const std::exception& e) {
      if (log_compiles()) {
        std::fprintf(stderr, "torchtpu: upgrading %s failed; it stays as first compiled: %s\n",
                     self->signature_.c_str(), e.what());
      }
    }
  });
}

pjrt::ExecuteResult Program::execute(PJRT_Buffer* const* args, size_t num_args,
                                     const pjrt::Device& device, int launch_id) const {
  if (!ready()) wait();
  const int64_t traced_start = trace::enabled() ? trace::now_ns() : 0;
  try {
    pjrt::ExecuteResult r = launched().execute(args, num_args, &device, nullptr, 0, launch_id);
    if (traced_start) {
      trace::execution_launched(signature_, index_of(device), traced_start, r.done.get());
    }
    return r;
  } catch (const pjrt::Error& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, !e.is_out_of_memory(), "torchtpu: out of device memory ",
                     "running ", signature_, ": ", e.what());
    TORCH_CHECK(false, "torchtpu: launching ", signature_, " failed: ", e.what());
  }
}

std::shared_ptr<Program> compile_program(const std::string& mlir, const std::string& signature,
                                         const std::string& why, const std::string& compile_options,
                                         Effort requested, bool upgrade) {
  Runtime& rt = get();
  const Effort effort = compile_options.empty() ? requested : Effort::kFull;
  // Explicit options (a program with collectives, or one compiled deterministic) are used as
  // given, at full effort; else the effort picks.
  const std::string& options = !compile_options.empty()     ? compile_options
                               : effort == Effort::kLight   ? rt.light_compile_options()
                               : effort == Effort::kQuick   ? rt.quick_compile_options()
                               : effort == Effort::kQuickO0 ? rt.quick_o0_compile_options()
                                                            : rt.compile_options();
  trace::Scope traced(trace::Kind::kCompile, "tpu::compile", -1, 0, signature);
  // Memory miss -> identical module in memory -> disk -> compile. The key covers everything
  // that decides the executable.
  TORCH_CHECK(!take_injected_failure(), injected_failure(signature));
  const std::string module_key = cache_key(fingerprint(rt), options, mlir);
  if (std::shared_ptr<pjrt::Executable> same = shared_modules().claim(module_key)) {
    metrics().programs_shared++;
    traced.set_detail(signature + " [identical module in memory]");
    if (log_compiles()) {
      std::fprintf(stderr, "torchtpu: %s reuses the executable of an identical module (%s)\n",
                   signature.c_str(), why.c_str());
    }
    auto program = std::make_shared<Program>(std::move(same), signature);
    if (disk_cache().enabled()) program->set_disk_key(module_key);
    return program;
  }
  // This thread builds the module now; an early exit (a failed compile) lets waiters try.
  struct Claim {
    const std::string& key;
    bool added = false;
    ~Claim() {
      if (!added) shared_modules().abandon(key);
    }
  } claim{module_key};
  std::string key;
  if (disk_cache().enabled()) {
    auto start = std::chrono::steady_clock::now();
    key = module_key;
    std::string payload;
    DiskCache::Load loaded = disk_cache().load(key, &payload);
    if (loaded == DiskCache::Load::kHit) {
      try {
        std::unique_ptr<pjrt::Executable> exe;
        without_plugin_log_on_failure([&] { exe = rt.client().deserialize(payload); });
        metrics().disk_cache_hits++;
        traced.set_detail(signature + " [disk cache hit]");
        if (log_compiles()) {
          std::fprintf(stderr, "torchtpu: loaded %s from the disk cache in %.1f ms (%s)\n",
                       signature.c_str(), ms_since(start), why.c_str());
        }
        std::shared_ptr<pjrt::Executable> shared = std::move(exe);
        shared_modules().add(module_key, shared);
        claim.added = true;
        auto program = std::make_shared<Program>(std::move(shared), signature);
        program->set_disk_key(key);
        return program;
      } catch (const pjrt::Error& e) {
        // An intact entry that does not load. Either the platform cannot reload executables
        // at all (the store below probes that, once per process, and disables the cache), or
        // the entry came from another build of the same plugin version (it is overwritten).
        // One line instead of the plugin's log (runtime/plugin_log.h); the whole message with
        // TORCHTPU_LOG_COMPILES=1.
        metrics().disk_cache_load_failures++;
        std::string why_not = e.what();
        if (!log_compiles()) why_not = first_line(why_not);
        std::fprintf(stderr,
                     "torchtpu: a disk cache entry for %s did not load (%s); compiling it again\n",
                     signature.c_str(), why_not.c_str());
      }
    } else if (loaded == DiskCache::Load::kCorrupt) {
      metrics().disk_cache_corrupt++;
      if (log_compiles()) {
        std::fprintf(stderr, "torchtpu: removed a corrupt disk cache entry for %s\n",
                     signature.c_str());
      }
    }
    metrics().disk_cache_misses++;
  }

  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<pjrt::Executable> exe;
  try {
    exe = rt.client().compile(mlir, options);
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(
        false, "torchtpu: XLA failed to compile ", signature, ": ", e.what(),
        dump_mlir() ? "\n" + mlir : std::string("\n(TORCHTPU_DUMP_MLIR=1 shows the module)"));
  }
  auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  (upgrade ? metrics().programs_upgraded : metrics().programs_compiled)++;
  metrics().compile_ns += ns;
  if (log_compiles()) {
    std::fprintf(stderr, "torchtpu: compiled %s in %.1f ms (%s)%s\n", signature.c_str(), ns / 1e6,
                 why.c_str(),
                 effort == Effort::kLight     ? " [light]"
                 : effort == Effort::kQuick   ? " [quick]"
                 : effort == Effort::kQuickO0 ? " [quick, O0]"
                 : upgrade                    ? " [upgrade]"
                                              : "");
  }
  if (dump_mlir()) std::fprintf(stderr, "%s\n", mlir.c_str());
  if (!key.empty() && disk_cache().enabled()) store_in_disk_cache(rt, key, *exe);
  traced.set_detail(signature + (key.empty() ? " [compiled]" : " [disk cache miss: compiled]"));
  std::shared_ptr<pjrt::Executable> shared = std::move(exe);
  shared_modules().add(module_key, shared);
  claim.added = true;
  auto program = std::make_shared<Program>(std::move(shared), signature);
  program->set_disk_key(key);
  return program;
}

void Program::wait() const {
  if (state_.load(std::memory_order_acquire) == kCompiling) {
    std::unique_lock<std::mutex> lk(mutex_);
    done_.wait(lk, [&] { return state_.load(std::memory_order_acquire) != kCompiling; });
  }
  TORCH_CHECK(!failed(), error_);
}

void Program::finish(const Program& compiled) {
  std::lock_guard<std::mutex> g(mutex_);
  exe_ = compiled.exe_;
  disk_key_ = compiled.disk_key_;
  state_.store(kReady, std::memory_order_release);
  done_.notify_all();
}

void Program::fail(std::string error) {
  std::lock_guard<std::mutex> g(mutex_);
  error_ = std::move(error);
  state_.store(kFailed, std::memory_order_release);
  done_.notify_all();
}

std::shared_ptr<Program> compile_program_async(std::string mlir, std::string signature,
                                               std::string why, size_t num_outputs,
                                               std::string recipe, std::string recipe_metadata,
                                               std::string compile_options, Effort effort) {
  if (!async_compile()) {
    std::shared_ptr<Program> program =
        compile_program(mlir, signature, why, compile_options, effort);
    if (!recipe.empty()) store_recipe(recipe, *program, recipe_metadata);
    return program;
  }
  auto program = std::make_shared<Program>(std::move(signature), num_outputs);
  // Light and quick programs of eager ops upgrade once hot (Program::upgrade_when_hot). Only
  // with the pool: synchronous compiles (debugging, above) keep what they compiled.
  if (effort != Effort::kFull && compile_options.empty() && light_upgrade_after() > 0) {
    program->upgrade_when_hot(mlir);
  }
  // Taken here, in the host's program order, not by whichever pool thread starts first.
  const bool injected = take_injected_failure();
  submit_compile([program, mlir = std::move(mlir), why = std::move(why), recipe = std::move(recipe),
                  metadata = std::move(recipe_metadata), options = std::move(compile_options),
                  injected, effort] {
    std::shared_ptr<Program> compiled;
    try {
      TORCH_CHECK(!injected, injected_failure(program->signature()));
      compiled = compile_program(mlir, program->signature(), why, options, effort);
    } catch (const c10::Error& e) {
      program->fail(e.what_without_backtrace());
      return;
    } catch (const std::exception& e) {
      program->fail("torchtpu: compiling " + program->signature() + " failed: " + e.what());
      return;
    }
    // Before the program is ready, as when compiles were synchronous: once a result can be
    // read, its cache entries exist. A failure to write only costs the next process a lowering.
    try {
      if (!recipe.empty()) store_recipe(recipe, *compiled, metadata);
    } catch (const std::exception&) {
    }
    program->finish(*compiled);
  });
  return program;
}

void fail_next_compiles(int n) { injected_failures.store(n > 0 ? n : 0); }

// ---- recipes --------------------------------------------------------------------------------
namespace {

void put_field(std::string& out, const std::string& field) {
  uint64_t n = field.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  out += field;
}

// This build of torchtpu: the version plus the identity of the loaded library file (path, size,
// modification time), so a rebuilt library, whose lowerings may differ, never replays recipes
// recorded by another build. (Executables themselves are keyed by their module, which survives
// rebuilds that do not change it.)
const std::string& code_stamp() {
  static const std::string stamp = [] {
    std::string s = std::string("torchtpu ") + kTorchtpuVersion;
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&recipe_key), &info) != 0 && info.dli_fname) {
      struct stat st;
      s += std::string("|") + info.dli_fname;
      if (::stat(info.dli_fname, &st) == 0) {
        s += "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec) + "|" + std::to_string(st.st_ino);
      }
    }
    return s;
  }();
  return stamp;
}

}  // namespace

std::string recipe_key(const std::string& typed_signature) {
  if (!disk_cache().enabled()) return std::string();
  Runtime& rt = get();
  std::string fields;
  put_field(fields, "torchtpu-recipe-key");
  put_field(fields, code_stamp());
  put_field(fields, fingerprint(rt));
  put_field(fields, rt.compile_options());
  // Which programs compile light, and how (every input of effort_for): a recipe names its
  // executable, so a restart with another threshold must not replay a light one for an op that
  // now compiles at full effort, or the other way round.
  const bool light = light_compile_level() >= 0;
  const bool quick = !rt.quick_compile_options().empty();
  const bool quick_o0 = !rt.quick_o0_compile_options().empty();
  put_field(fields, rt.light_compile_options() + std::to_string(light) + std::to_string(quick) +
                        std::to_string(quick_o0) +
                        (light || quick ? "|" + std::to_string(light_compile_max_elements()) : ""));
  put_field(fields, typed_signature);
  return to_hex(sha256(fields));
}

Recipe load_recipe(const std::string& key, const std::string& name) {
  Recipe r;
  if (key.empty() || !disk_cache().enabled()) return r;
  auto start = std::chrono::steady_clock::now();
  std::string payload;
  DiskCache::Load loaded = disk_cache().load(key, &payload);
  if (loaded == DiskCache::Load::kCorrupt) metrics().disk_cache_corrupt++;
  if (loaded != DiskCache::Load::kHit) return r;
  std::string exe_key, signature;
  try {
    RecipeReader in(payload);
    exe_key = in.str();
    signature = in.str();
    r.metadata = in.str();
  } catch (const std::runtime_error&) {
    metrics().disk_cache_corrupt++;
    return Recipe();
  }
  if (!name.empty()) signature = name;
  if (std::shared_ptr<pjrt::Executable> same = shared_modules().find(exe_key)) {
    // Another signature of this process already loaded or compiled the executable.
    metrics().programs_shared++;
    metrics().disk_cache_signature_hits++;
    auto program = std::make_shared<Program>(std::move(same), signature);
    program->set_disk_key(exe_key);
    r.program = std::move(program);
    return r;
  }
  trace::Scope traced(trace::Kind::kCompile, "tpu::compile", -1, 0,
                      signature + " [disk cache hit by signature]");
  std::string bytes;
  // The executable may have been evicted or damaged since: then the caller builds as usual.
  loaded = disk_cache().load(exe_key, &bytes);
  if (loaded == DiskCache::Load::kCorrupt) metrics().disk_cache_corrupt++;
  if (loaded != DiskCache::Load::kHit) return Recipe();
  try {
    std::shared_ptr<pjrt::Executable> exe;
    without_plugin_log_on_failure([&] { exe = get().client().deserialize(bytes); });
    shared_modules().add(exe_key, exe);
    auto program = std::make_shared<Program>(std::move(exe), signature);
    program->set_disk_key(exe_key);
    r.program = std::move(program);
  } catch (const pjrt::Error& e) {
    // Intact but refused (another build of the plugin): removed, so the caller's build
    // compiles and rewrites it instead of trying it a second time. One line instead of the
    // plugin's log (runtime/plugin_log.h).
    metrics().disk_cache_load_failures++;
    disk_cache().remove(exe_key);
    std::string why_not = log_compiles() ? std::string(e.what()) : first_line(e.what());
    std::fprintf(stderr,
                 "torchtpu: a disk cache entry for %s did not load (%s); compiling it again\n",
                 signature.c_str(), why_not.c_str());
    return Recipe();
  }
  metrics().disk_cache_hits++;
  metrics().disk_cache_signature_hits++;
  if (log_compiles()) {
    std::fprintf(stderr, "torchtpu: loaded %s from the disk cache by its signature in %.1f ms\n",
                 signature.c_str(), ms_since(start));
  }
  return r;
}

void store_recipe(const std::string& key, const Program& program, const std::string& metadata) {
  if (key.empty() || program.disk_key().empty() || !disk_cache().enabled()) return;
  RecipeWriter out;
  out.str(program.disk_key());
  out.str(program.signature());
  out.str(metadata);
  // A failure to write only costs the next process a lowering: the module-keyed entry remains.
  DiskCache::StoreResult stored = disk_cache().store(key, out.bytes());
  if (stored.written) metrics().disk_cache_signature_writes++;
  metrics().disk_cache_evictions += stored.evicted;
}

void RecipeWriter::i64(int64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }

void RecipeWriter::str(const std::string& s) {
  i64(static_cast<int64_t>(s.size()));
  out_ += s;
}

void RecipeWriter::ints(const std::vector<int64_t>& v) {
  i64(static_cast<int64_t>(v.size()));
  for (int64_t x : v) i64(x);
}

int64_t RecipeReader::i64() {
  if (in_.size() - pos_ < sizeof(int64_t)) throw std::runtime_error("short recipe");
  int64_t v;
  std::memcpy(&v, in_.data() + pos_, sizeof(v));
  pos_ += sizeof(v);
  return v;
}

std::string RecipeReader::str() {
  int64_t n = i64();
  if (n < 0 || static_cast<uint64_t>(n) > in_.size() - pos_) {
    throw std::runtime_error("short recipe");
  }
  std::string s = in_.substr(pos_, static_cast<size_t>(n));
  pos_ += static_cast<size_t>(n);
  return s;
}

std::vector<int64_t> RecipeReader::ints() {
  int64_t n = i64();
  if (n < 0 || static_cast<uint64_t>(n) > (in_.size() - pos_) / sizeof(int64_t)) {
    throw std::runtime_error("short recipe");
  }
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = i64();
  return v;
}

}  // namespace torchtpu::runtime
