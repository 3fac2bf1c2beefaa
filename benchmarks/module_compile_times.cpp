// Compile seconds of given StableHLO modules under each of XLA:CPU's compile efforts, in one
// process, best of N rounds per (module, effort), the efforts interleaved: what
// benchmarks/module_compile_times.py builds and runs (the modules are those a cold run compiled).
// Efforts: full (the fusion emitters at full optimization), quick (the elemental emitters),
// quick_o0 (the elemental emitters at LLVM level 0) and light (the fusion emitters at level 0),
// the option sets of runtime::effort_for. Not built by CMake:
//   g++ -O2 -std=c++17 -Icsrc -I$P/include benchmarks/module_compile_times.cpp \
//       build/libtorchtpu_pjrt.a -ldl -lpthread -o /tmp/module_compile_times
//   TORCHTPU_TEST_PLUGIN=$P/xla_cpu_pjrt.so /tmp/module_compile_times ROUNDS FILE.mlir...
// Prints one line per module: its path, then effort=milliseconds (-1: that compile failed).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pjrt/pjrt.h"

using namespace torchtpu::pjrt;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ROUNDS FILE.mlir...\n", argv[0]);
    return 2;
  }
  auto plugin = Plugin::load(std::getenv("TORCHTPU_TEST_PLUGIN"));
  auto client = Client::create(plugin, {{"cpu_device_count", int64_t{1}}});
  const OptionOverride elemental{"xla_cpu_use_fusion_emitters", false};
  const OptionOverride level0 = OptionOverride::integer("xla_backend_optimization_level", 0);
  const std::vector<std::pair<std::string, std::string>> efforts = {
      {"full", portable_compile_options()},
      {"quick", portable_compile_options({elemental})},
      {"quick_o0", portable_compile_options({elemental, level0})},
      {"light", portable_compile_options({level0})},
  };
  const int rounds = std::atoi(argv[1]);
  for (int f = 2; f < argc; ++f) {
    std::ifstream in(argv[f]);
    std::stringstream text;
    text << in.rdbuf();
    const std::string mlir = text.str();
    std::vector<double> best(efforts.size(), 1e18);
    for (int r = 0; r < rounds; ++r) {
      for (size_t e = 0; e < efforts.size(); ++e) {
        const auto start = std::chrono::steady_clock::now();
        try {
          auto exe = client->compile(mlir, efforts[e].second);
        } catch (const std::exception&) {
          best[e] = -1;
          continue;
        }
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (best[e] >= 0 && ms < best[e]) best[e] = ms;
      }
    }
    std::printf("%s", argv[f]);
    for (size_t e = 0; e < efforts.size(); ++e) {
      std::printf(" %s=%.2f", efforts[e].first.c_str(), best[e]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
