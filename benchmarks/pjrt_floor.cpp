// The PJRT floor under eager_overhead.py: median microseconds of one PJRT_LoadedExecutable_Execute
// (and dropping its result: the output buffer and the completion event) of the same StableHLO
// programs tpu's eager add/sum/matmul compile to, called from C++ with nothing of torch or
// torchtpu's engine around it; plus one scalar host->device upload. What XLA:CPU itself costs
// per op, so eager figures can be split into the plugin's share and ours. Not built by CMake:
//   P=$(.venv/bin/python -c 'import os, xla_plugins.xla_cpu_pjrt as m;
//   print(os.path.dirname(m.__file__))')
//   g++ -O2 -std=c++17 -Icsrc -I$P/include benchmarks/pjrt_floor.cpp build/libtorchtpu_pjrt.a \
//       -ldl -lpthread -o /tmp/pjrt_floor && TORCHTPU_TEST_PLUGIN=$P/xla_cpu_pjrt.so
//       /tmp/pjrt_floor 5
// Prints one JSON line per round (argument: rounds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"
using namespace torchtpu::pjrt;
static const char* kAdd = R"(module @add {
  func.func public @main(%a: tensor<1xf32>, %b: tensor<1xf32>) -> tensor<1xf32> {
    %0 = stablehlo.add %a, %b : tensor<1xf32>
    return %0 : tensor<1xf32>
  }
})";
static const char* kSum = R"(module @sum {
  func.func public @main(%a: tensor<64x64xf32>) -> tensor<f32> {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<64x64xf32>, tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
})";
static const char* kDot = R"(module @dot {
  func.func public @main(%a: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    return %0 : tensor<64x64xf32>
  }
})";
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
template <class F>
double med(F f, int reps = 200, int batches = 31) {
  for (int i = 0; i < 500; ++i) f();
  std::vector<double> s;
  for (int b = 0; b < batches; ++b) {
    double t = now();
    for (int i = 0; i < reps; ++i) f();
    s.push_back((now() - t) / reps * 1e6);
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}
int main(int argc, char** argv) {
  auto plugin = Plugin::load(std::getenv("TORCHTPU_TEST_PLUGIN"));
  auto client = Client::create(plugin, {{"cpu_device_count", int64_t{1}}});
  const Device& dev = *client->devices()[0];
  auto add = client->compile(kAdd, portable_compile_options());
  auto sum = client->compile(kSum, portable_compile_options());
  auto dot = client->compile(kDot, portable_compile_options());
  float one = 1;
  std::vector<float> big(4096, 0.5f);
  auto a = client->buffer_from_host(&one, PJRT_Buffer_Type_F32, {1}, dev);
  auto m = client->buffer_from_host(big.data(), PJRT_Buffer_Type_F32, {64, 64}, dev);
  PJRT_Buffer* args2[2] = {a->raw(), a->raw()};
  PJRT_Buffer* args1[1] = {m->raw()};
  int rounds = argc > 1 ? std::atoi(argv[1]) : 1;
  for (int r = 0; r < rounds; ++r) {
    double t_add = med([&] { auto x = add->execute(args2, 2, &dev); });
    double t_sum = med([&] { auto x = sum->execute(args1, 1, &dev); });
    double t_dot = med([&] { auto x = dot->execute(args1, 1, &dev); });
    double t_up =
        med([&] { auto buf = client->buffer_from_host(&one, PJRT_Buffer_Type_F32, {}, dev); });
    std::printf(
        "{\"pjrt_floor\": true, \"add_1elem_us\": %.3f, \"sum_64x64_us\": %.3f, "
        "\"matmul_64x64_us\": %.3f, \"upload_scalar_us\": %.3f}\n",
        t_add, t_sum, t_dot, t_up);
    std::fflush(stdout);
  }
}
