#include "config/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace torchtpu::config {

// scripts/env_table.py reads this table from the source (string literals only, in this form).
const std::vector<Variable>& variables() {
  static const std::vector<Variable> vars = {
      {"TORCHTPU_PJRT_PLUGIN", "", "path of the PJRT plugin to load (wins over TORCHTPU_PLATFORM)"},
      {"TORCHTPU_PLATFORM", "", "pick the installed plugin for `tpu`, `cuda` or `cpu`"},
      {"TORCHTPU_CPU_DEVICE_COUNT", "1", "devices the XLA CPU plugin exposes (1 to 4096)"},
      {"TORCHTPU_LOCAL_DEVICES", "rank",
       "all: under torchrun every process opens every device (rank: only tpu:LOCAL_RANK)"},
      {"TPU_LAUNCH_BLOCKING", "0", "1: every launch waits for its execution (debugging)"},
      {"TORCHTPU_ASYNC_COMPILE", "1",
       "0: an eager op's compile blocks the op, as before (debugging)"},
      {"TORCHTPU_COMPILE_THREADS", "cores", "threads that compile eager ops in the background"},
      {"TORCHTPU_CPU_FALLBACK", "1",
       "0: an op without a lowering raises instead of running on CPU"},
      {"TORCHTPU_INDEX_CHECKS", "1", "0: no device-side index checks (XLA then clamps indices)"},
      {"TORCHTPU_DONATE", "1", "0: compiled graphs never donate their input buffers"},
      {"TORCHTPU_LOG_COMPILES", "0", "1: one line per XLA compile, with its signature and reason"},
      {"TORCHTPU_DUMP_MLIR", "0", "1: print every compiled StableHLO module"},
      {"TORCHTPU_SIZE_BUCKETS", "1",
       "0: storages keep their exact size (1, XLA:CPU/GPU: they round up to size buckets so "
       "elementwise programs ignore the exact size)"},
      {"TORCHTPU_SIZE_BUCKET_MIN", "4096", "elements of the smallest size bucket (a power of 2)"},
      {"TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS", "64",
       "with size buckets: smaller storages keep their size, smaller results run exact programs"},
      {"TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS", "never",
       "with size buckets: elementwise results over strided views this large run size-generic "
       "programs (fewer programs, 1.6-5x slower per call on XLA:CPU)"},
      {"TORCHTPU_LIGHT_COMPILE", "0",
       "1: small eager op programs compile first at a low XLA backend optimization level, and "
       "again at full effort once hot (results may differ in the last bits between the two)"},
      {"TORCHTPU_LIGHT_COMPILE_LEVEL", "0", "xla_backend_optimization_level of light compiles"},
      {"TORCHTPU_QUICK_COMPILE", "1",
       "XLA:CPU: small eager op programs that reduce nothing compile first with XLA's elemental "
       "emitters (20-35% less compile time, the same values), and again at full effort once hot"},
      {"TORCHTPU_QUICK_COMPILE_O0", "1",
       "XLA:CPU: quick programs whose every op rounds once per element and that sum no float "
       "product compile at LLVM optimization level 0 too (about 40% less again, the same values)"},
      {"TORCHTPU_LIGHT_COMPILE_MAX_ELEMENTS", "65536",
       "largest array of an eager op program that compiles light or quick"},
      {"TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER", "8",
       "launches after which a light or quick program compiles again at full effort in the "
       "background (0: never)"},
      {"TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES", "4096", "programs kept in memory (least recent go)"},
      {"TORCHTPU_CACHE", "1", "0: no on-disk compilation cache"},
      {"TORCHTPU_CACHE_DIR", "~/.cache/torchtpu", "folder of the on-disk compilation cache"},
      {"TORCHTPU_CACHE_MAX_BYTES", "2G", "size bound of the on-disk cache (bytes, or K/M/G)"},
      {"TORCHTPU_COLLECTIVES", "auto",
       "host: collectives of tpu tensors stage through host memory and gloo (auto: inside XLA "
       "programs where the ranks' devices are one PJRT world)"},
      {"TORCHTPU_PJRT_WORLD", "0",
       "1: on TPU/GPU, init_process_group makes the processes one PJRT world (in-program "
       "collectives across processes; not yet run on hardware)"},
      {"TORCHTPU_ROUTE_INDUCTOR", "1", "0: torch.compile's Inductor handles tpu graphs itself"},
      {"TORCHTPU_PATCH_SAFETENSORS", "1",
       "0: safetensors' safe_open/load_file keep their own device check (no tpu)"},
      {"TORCHTPU_PATCH_ACCELERATE", "1",
       "0: Accelerate under torchrun is left as it is (no tpu DDP backend)"},
      {"TORCHTPU_GPU_PREALLOCATE", "0",
       "1: XLA:GPU reserves its memory fraction of the GPU at start (JAX's default)"},
      {"TORCHTPU_GPU_MEMORY_FRACTION", "",
       "XLA:GPU's share of GPU memory, (0, 1] (the plugin's default: 0.75)"},
      {"TORCHTPU_GPU_ALLOCATOR", "",
       "XLA:GPU's allocator: `bfc` (the plugin's default), `platform`, `cuda_async`"},
      {"TORCH_TPU_DEFER_AND_FUSE", "0",
       "1: fused eager: ops record into one program per region (torchtpu.set_eager_mode)"},
      {"TORCHTPU_FUSED_MAX_OPS", "4096", "fused eager: ops in one region before it runs"},
      {"TORCHTPU_FUSED_CHURN_LIMIT", "2",
       "fused eager: programs a region may compile for new shapes before it runs op by op"},
  };
  return vars;
}

namespace {

const Variable& declared(const char* name) {
  for (const Variable& v : variables()) {
    if (std::strcmp(v.name, name) == 0) return v;
  }
  throw std::invalid_argument(std::string("torchtpu: environment variable ") + name +
                              " is read but not declared in csrc/config/config.cpp");
}

}  // namespace

std::optional<std::string> raw(const char* name) {
  declared(name);
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool flag(const char* name, bool default_on) {
  std::optional<std::string> v = raw(name);
  if (!v) return default_on;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return !(s == "0" || s == "false" || s == "off" || s == "no");
}

int64_t positive_int(const char* name, int64_t fallback, int64_t max) {
  std::optional<std::string> v = raw(name);
  if (!v) return fallback;
  // strtoll alone would turn "abc" into 0 and "-1" into a count some layer rejects unnamed.
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || errno != 0 || n < 1 || n > max) {
    throw std::invalid_argument(
        std::string(name) + "='" + *v + "' is not valid: expected an integer from 1 to " +
        std::to_string(max) + " (default " + std::to_string(fallback) + ")");
  }
  return n;
}

double fraction(const char* name, double fallback) {
  std::optional<std::string> v = raw(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || errno != 0 || !(x > 0.0 && x <= 1.0)) {
    throw std::invalid_argument(std::string(name) + "='" + *v +
                                "' is not valid: expected a number in (0, 1]");
  }
  return x;
}

std::string choice(const char* name, const std::vector<std::string>& allowed,
                   const std::string& fallback) {
  std::optional<std::string> v = raw(name);
  if (!v) return fallback;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
  std::string choices;
  for (const std::string& a : allowed) choices += (choices.empty() ? "" : ", ") + a;
  throw std::invalid_argument(std::string(name) + "='" + *v + "' is not valid: expected one of " +
                              choices);
}

}  // namespace torchtpu::config
