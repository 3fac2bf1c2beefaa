// Tests of the PJRT layer against a real plugin named by TORCHTPU_TEST_PLUGIN (the XLA CPU
// plugin from the xla-cpu-pjrt wheel in CI).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pjrt/kv_store.h"
#include "pjrt/pjrt.h"
#include "pjrt/process_options.h"
#include "pjrt/profiler_extension.h"
#include "pjrt/world.h"

namespace torchtpu::pjrt {
namespace {

constexpr char kAddProgram[] = R"mlir(
module @add {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)mlir";

// Argument 0 is declared donated: its storage may be reused for output 0.
constexpr char kDonatingAddProgram[] = R"mlir(
module @donating_add {
  func.func public @main(%a: tensor<4xf32> {tf.aliasing_output = 0 : i32},
                         %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)mlir";

// Sums its argument over two replicas (what torchtpu emits for an all_reduce over a group of two).
constexpr char kAllReduceProgram[] = R"mlir(
module @all_reduce attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%a) ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %s = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)mlir";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The XLA CPU plugin exposes one device unless the client create option "cpu_device_count"
// (int64) asks for more; two let the tests cover cross-device copies and portable execution.
constexpr int64_t kCpuDevices = 2;

class PjrtTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    client_.reset();
    plugin_.reset();
  }

  // Set up lazily in SetUp rather than SetUpTestSuite so a missing or broken plugin fails every
  // test with its message instead of gtest skipping them.
  void SetUp() override {
    if (client_ != nullptr) return;
    const char* path = std::getenv("TORCHTPU_TEST_PLUGIN");
    ASSERT_TRUE(path != nullptr && *path != '\0')
        << "set TORCHTPU_TEST_PLUGIN to the path of a PJRT plugin, e.g. "
           ".venv/lib/python3.11/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
    try {
      plugin_path_ = path;
      plugin_ = Plugin::load(path);
      client_ = Client::create(plugin_, {{"cpu_device_count", kCpuDevices}});
    } catch (const Error& e) {
      FAIL() << "cannot set up the PJRT client: " << e.what();
    }
  }

  const Device& device(size_t i) const { return *client_->devices().at(i); }
  const Device& last_device() const { return *client_->devices().back(); }

  std::unique_ptr<Buffer> f32_buffer(const std::vector<float>& values, const Device& dev) const {
    return client_->buffer_from_host(values.data(), PJRT_Buffer_Type_F32,
                                     {static_cast<int64_t>(values.size())}, dev);
  }

  static std::vector<float> read_f32(const Buffer& buffer, size_t n) {
    std::vector<float> out(n);
    buffer.to_host(out.data(), n * sizeof(float));
    return out;
  }

  static std::string plugin_path_;
  static std::shared_ptr<Plugin> plugin_;
  static std::unique_ptr<Client> client_;
};

std::string PjrtTest::plugin_path_;
std::shared_ptr<Plugin> PjrtTest::plugin_;
std::unique_ptr<Client> PjrtTest::client_;

TEST(PjrtHelpers, ElementSize) {
  EXPECT_EQ(element_size(PJRT_Buffer_Type_PRED), 1u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_U8), 1u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_BF16), 2u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_F16), 2u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_S32), 4u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_F32), 4u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_S64), 8u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_C64), 8u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_C128), 16u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_S4), 0u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_INVALID), 0u);
}

TEST(PjrtHelpers, PortableCompileOptionsWireFormat) {
  const std::string expected(
      "\x1a\x0f"                                      // field 3, 15 bytes
      "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"  // device_ordinal = -1
      "\x20\x01"                                      // num_replicas = 1
      "\x28\x01"                                      // num_partitions = 1
      "\x20\x01",                                     // compile_portable_executable
      19);
  EXPECT_EQ(portable_compile_options(), expected);
}

TEST(PjrtHelpers, ReplicatedCompileOptionsWireFormat) {
  const std::string expected(
      "\x1a\x1b"                                      // field 3, 27 bytes
      "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"  // device_ordinal = -1
      "\x20\x02"                                      // num_replicas = 2
      "\x28\x01"                                      // num_partitions = 1
      "\x4a\x0a"                                      // device_assignment, 10 bytes
      "\x08\x02"                                      //   replica_count = 2
      "\x10\x01"                                      //   computation_count = 1
      "\x1a\x04"                                      //   computation_devices, 4 bytes
      "\x0a\x02\x03\x01",                             //     replica_device_ids [3, 1]
      29);
  EXPECT_EQ(replicated_compile_options({3, 1}), expected);
  EXPECT_THROW(replicated_compile_options({}), Error);
}

TEST(PjrtHelpers, CompileOptionOverridesWireFormat) {
  const std::string base = portable_compile_options();
  const std::string name = "xla_gpu_exclude_nondeterministic_ops";  // 36 bytes
  std::string entry;
  entry += '\x0a';  // key (field 1), length-delimited
  entry += static_cast<char>(name.size());
  entry += name;
  entry +=
      std::string("\x12\x02\x10\x01", 4);  // value (field 2): OptionOverrideProto{bool_field: true}
  std::string expected = base;
  expected += '\x3a';  // env_option_overrides (field 7), length-delimited map entry
  expected += static_cast<char>(entry.size());
  expected += entry;
  EXPECT_EQ(portable_compile_options({{name, true}}), expected);
  // false is encoded too (an explicit override, not an absent one).
  const std::string off = portable_compile_options({{name, false}});
  EXPECT_EQ(off.substr(off.size() - 2), std::string("\x10\x00", 2));
  // The replicated options carry the same entry after their build options.
  const std::string rep = replicated_compile_options({3, 1}, {{name, true}});
  EXPECT_EQ(rep, replicated_compile_options({3, 1}) + expected.substr(base.size()));
  // An integer override's value is the oneof's int_field (3).
  const std::string level =
      portable_compile_options({OptionOverride::integer("xla_backend_optimization_level", 2)});
  EXPECT_EQ(level.substr(level.size() - 4), std::string("\x12\x02\x18\x02", 4));
}

TEST_F(PjrtTest, LoadingTwiceReturnsTheSamePlugin) {
  EXPECT_EQ(Plugin::load(plugin_path_).get(), plugin_.get());
  EXPECT_EQ(plugin_->api_major(), PJRT_API_MAJOR);
  EXPECT_GE(plugin_->api_minor(), PJRT_API_MINOR);
  for (const auto& [name, value] : plugin_->attributes()) {
    if (const auto* s = std::get_if<std::string>(&value)) std::cout << name << " = " << *s << "\n";
  }
}

TEST(PjrtPlugin, MissingFileIsNotFound) {
  try {
    Plugin::load("/nonexistent/libnothing_pjrt.so");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
  }
}

TEST_F(PjrtTest, ProbeReportsTheLoadedPluginsVersion) {
  EXPECT_EQ(Plugin::probe(plugin_path_),
            std::make_pair(plugin_->api_major(), plugin_->api_minor()));
}

TEST(PjrtPlugin, ProbeRaisesWhatLoadRaises) {
  try {
    Plugin::probe("/nonexistent/libnothing_pjrt.so");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
  }
}

TEST(PjrtPlugin, LibraryWithoutGetPjrtApiIsRejected) {
  // Locate libm through the loader so the test does not hard-code a distribution's layout.
  void* libm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(libm, nullptr);
  Dl_info info{};
  ASSERT_NE(dladdr(dlsym(libm, "cos"), &info), 0);
  const std::string path = info.dli_fname;
  dlclose(libm);
  try {
    Plugin::load(path);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GetPjrtApi"), std::string::npos) << e.what();
  }
}

TEST_F(PjrtTest, ClientDescribesItsDevices) {
  EXPECT_EQ(client_->platform_name(), "cpu");
  EXPECT_FALSE(client_->platform_version().empty());
  EXPECT_EQ(client_->process_index(), 0);
  ASSERT_EQ(client_->devices().size(), static_cast<size_t>(kCpuDevices));
  for (size_t i = 0; i < client_->devices().size(); ++i) {
    const Device& dev = device(i);
    EXPECT_EQ(dev.id(), static_cast<int>(i));
    EXPECT_FALSE(dev.kind().empty());
    EXPECT_FALSE(dev.debug_string().empty());
    EXPECT_GE(dev.local_hardware_id(), -1);
    EXPECT_FALSE(dev.memory_kinds().empty());
  }
  std::cout << "device 0: kind=" << device(0).kind() << " debug=" << device(0).debug_string()
            << " memories=";
  for (const auto& kind : device(0).memory_kinds()) std::cout << kind << " ";
  std::cout << "\n";
}

TEST_F(PjrtTest, DefaultClientHasAtLeastOneDevice) {
  auto client = Client::create(plugin_);
  EXPECT_GE(client->devices().size(), 1u);
}

// The CPU plugin lets a C++ exception (std::bad_variant_access) escape PJRT_Client_Create for
// an option of the wrong type; the wrapper must still surface it as Error.
TEST_F(PjrtTest, BadCreateOptionThrows) {
  try {
    Client::create(plugin_, {{"cpu_device_count", std::string("two")}});
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PJRT_Client_Create"), std::string::npos) << e.what();
  }
}

TEST_F(PjrtTest, F32RoundTrip) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f};
  auto buffer = f32_buffer(values, device(0));
  EXPECT_EQ(buffer->element_type(), PJRT_Buffer_Type_F32);
  EXPECT_EQ(buffer->dimensions(), std::vector<int64_t>{4});
  EXPECT_EQ(buffer->on_device_size_in_bytes(), 16u);
  EXPECT_EQ(buffer->device(), device(0).raw());
  EXPECT_FALSE(buffer->is_deleted());
  buffer->ready_event()->await();
  EXPECT_EQ(read_f32(*buffer, 4), values);
}

TEST_F(PjrtTest, S64RoundTripRank2) {
  const std::vector<int64_t> values = {1, -2, 3, int64_t{1} << 40, -(int64_t{1} << 50), 6};
  auto buffer = client_->buffer_from_host(values.data(), PJRT_Buffer_Type_S64, {2, 3}, device(0));
  EXPECT_EQ(buffer->element_type(), PJRT_Buffer_Type_S64);
  EXPECT_EQ(buffer->dimensions(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(buffer->on_device_size_in_bytes(), 48u);
  std::vector<int64_t> out(6);
  buffer->to_host(out.data(), out.size() * sizeof(int64_t));
  EXPECT_EQ(out, values);
}

TEST_F(PjrtTest, ImmutableUntilTransferCompletesHandsBackTheEvent) {
  const std::vector<float> values = {1, 2, 3, 4};
  std::unique_ptr<Event> done;
  auto buffer = client_->buffer_from_host(values.data(), PJRT_Buffer_Type_F32, {4}, device(0),
                                          HostSemantics::kImmutableUntilTransferCompletes, &done);
  ASSERT_NE(done, nullptr);
  done->await();
  EXPECT_TRUE(done->is_ready());
  EXPECT_EQ(read_f32(*buffer, 4), values);
}

// The distributed backend lends its host staging memory to the results this way: on XLA:CPU the
// buffer aliases the memory, so the event fires only once the buffer is gone.
TEST_F(PjrtTest, MutableZeroCopyHoldsTheHostMemoryUntilTheBufferDies) {
  alignas(64) float values[16];
  for (int i = 0; i < 16; ++i) values[i] = static_cast<float>(i);
  EXPECT_THROW(client_->buffer_from_host(values, PJRT_Buffer_Type_F32, {16}, device(0),
                                         HostSemantics::kMutableZeroCopy),
               Error);
  std::unique_ptr<Event> done;
  auto buffer = client_->buffer_from_host(values, PJRT_Buffer_Type_F32, {16}, device(0),
                                          HostSemantics::kMutableZeroCopy, &done);
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(read_f32(*buffer, 16), std::vector<float>(values, values + 16));
  EXPECT_FALSE(done->is_ready());  // XLA:CPU aliases 64-byte aligned memory
  buffer.reset();
  done->await();
  EXPECT_TRUE(done->is_ready());
}

TEST_F(PjrtTest, ToHostWithWrongSizeThrows) {
  auto buffer = f32_buffer({1, 2, 3, 4}, device(0));
  std::vector<float> out(3);
  EXPECT_THROW(buffer->to_host(out.data(), out.size() * sizeof(float)), Error);
}

TEST_F(PjrtTest, CompileAndExecuteOnFirstAndLastDevice) {
  auto start = std::chrono::steady_clock::now();
  auto executable = client_->compile(kAddProgram, portable_compile_options());
  std::cout << "compile of a 4-element add: " << seconds_since(start) * 1e3 << " ms\n";
  EXPECT_EQ(executable->num_outputs(), 1u);
  EXPECT_FALSE(executable->name().empty());

  for (const Device* dev : {&device(0), &last_device()}) {
    auto a = f32_buffer({1, 2, 3, 4}, *dev);
    auto b = f32_buffer({10, 20, 30, 40}, *dev);
    start = std::chrono::steady_clock::now();
    ExecuteResult result = executable->execute({a->raw(), b->raw()}, dev);
    result.done->await();
    std::cout << "execute on device " << dev->id() << ": " << seconds_since(start) * 1e6 << " us\n";
    ASSERT_EQ(result.outputs.size(), 1u);
    EXPECT_EQ(result.outputs[0]->device(), dev->raw());
    EXPECT_EQ(read_f32(*result.outputs[0], 4), (std::vector<float>{11, 22, 33, 44}));
  }
}

TEST_F(PjrtTest, SerializedExecutableRunsAfterDeserialize) {
  auto executable = client_->compile(kAddProgram, portable_compile_options());
  const std::string bytes = executable->serialize();
  ASSERT_FALSE(bytes.empty());
  auto restored = client_->deserialize(bytes);
  EXPECT_EQ(restored->num_outputs(), 1u);
  auto a = f32_buffer({1, 2, 3, 4}, last_device());
  auto b = f32_buffer({0.5f, 0.5f, 0.5f, 0.5f}, last_device());
  ExecuteResult result = restored->execute({a->raw(), b->raw()}, &last_device());
  EXPECT_EQ(read_f32(*result.outputs[0], 4), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f}));

  auto overridden = client_->deserialize(bytes, portable_compile_options());
  ExecuteResult again = overridden->execute({a->raw(), b->raw()}, &last_device());
  EXPECT_EQ(read_f32(*again.outputs[0], 4), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f}));
}

// XLA's deterministic-ops switches live in DebugOptions, which every plugin's XLA shares: the
// CPU plugin takes them (and ignores them) as env_option_overrides, and refuses a name its XLA
// does not know, which is how torchtpu probes which name a GPU plugin's era has.
TEST_F(PjrtTest, CompileOptionOverridesAreAppliedByThePlugin) {
  for (const char* name : {"xla_gpu_exclude_nondeterministic_ops", "xla_gpu_deterministic_ops"}) {
    auto executable = client_->compile(kAddProgram, portable_compile_options({{name, true}}));
    auto a = f32_buffer({1, 2, 3, 4}, device(0));
    auto b = f32_buffer({1, 1, 1, 1}, device(0));
    ExecuteResult result = executable->execute({a->raw(), b->raw()}, &device(0));
    EXPECT_EQ(read_f32(*result.outputs[0], 4), (std::vector<float>{2, 3, 4, 5})) << name;
  }
  EXPECT_THROW(client_->compile(kAddProgram,
                                portable_compile_options({{"xla_torchtpu_no_such_option", true}})),
               Error);
}

// Light compiles lower XLA's backend optimization level by an integer override.
TEST_F(PjrtTest, IntegerOptionOverrideIsAppliedByThePlugin) {
  auto executable = client_->compile(
      kAddProgram,
      portable_compile_options({OptionOverride::integer("xla_backend_optimization_level", 0)}));
  auto a = f32_buffer({1, 2, 3, 4}, device(0));
  auto b = f32_buffer({1, 1, 1, 1}, device(0));
  ExecuteResult result = executable->execute({a->raw(), b->raw()}, &device(0));
  EXPECT_EQ(read_f32(*result.outputs[0], 4), (std::vector<float>{2, 3, 4, 5}));
}

TEST_F(PjrtTest, CopyToDeviceMovesDataBetweenDevices) {
  ASSERT_GE(client_->devices().size(), 2u);
  auto src = f32_buffer({7, 8, 9, 10}, device(0));
  auto dst = src->copy_to_device(device(1));
  EXPECT_EQ(dst->device(), device(1).raw());
  EXPECT_EQ(read_f32(*dst, 4), (std::vector<float>{7, 8, 9, 10}));
  EXPECT_EQ(read_f32(*src, 4), (std::vector<float>{7, 8, 9, 10}));
}

TEST_F(PjrtTest, InvalidProgramThrowsAndTheClientStaysUsable) {
  try {
    client_->compile("module { this is not mlir }", portable_compile_options());
    FAIL() << "expected Error";
  } catch (const Error& e) {
    std::cout << "invalid MLIR: code " << e.code() << ": " << e.what() << "\n";
    EXPECT_NE(e.code(), -1);
    EXPECT_NE(std::string(e.what()).find("PJRT_Client_Compile"), std::string::npos);
  }
  auto executable = client_->compile(kAddProgram, portable_compile_options());
  EXPECT_EQ(executable->num_outputs(), 1u);
}

TEST_F(PjrtTest, EmptyCompileOptionsThrowInsteadOfAborting) {
  EXPECT_THROW(client_->compile(kAddProgram, ""), Error);
}

TEST_F(PjrtTest, ExecutionEventsReportCompletion) {
  auto executable = client_->compile(kAddProgram, portable_compile_options());
  auto a = f32_buffer({1, 1, 1, 1}, device(0));
  ExecuteResult result = executable->execute({a->raw(), a->raw()}, &device(0));
  std::promise<std::string> fired;
  result.done->on_ready([&fired](const std::string& error) { fired.set_value(error); });
  result.done->await();
  EXPECT_TRUE(result.done->is_ready());
  EXPECT_EQ(fired.get_future().get(), "");

  std::vector<float> out(4);
  auto copied = result.outputs[0]->to_host_async(out.data(), out.size() * sizeof(float));
  copied->await();
  EXPECT_EQ(out, (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(PjrtTest, WrongArgumentCountThrows) {
  auto executable = client_->compile(kAddProgram, portable_compile_options());
  auto a = f32_buffer({1, 1, 1, 1}, device(0));
  EXPECT_THROW(executable->execute({a->raw()}, &device(0)), Error);
}

TEST_F(PjrtTest, MemoryStatsDoNotCrash) {
  auto buffer = f32_buffer({1, 2, 3, 4}, device(0));
  MemoryStats stats = device(0).memory_stats();
  std::cout << "memory_stats: bytes_in_use=" << stats.bytes_in_use
            << " peak=" << stats.peak_bytes_in_use << " limit=" << stats.bytes_limit << "\n";
  EXPECT_GE(stats.bytes_in_use, -1);
}

TEST_F(PjrtTest, DonationConsumesTheInputUnlessMarkedNonDonatable) {
  auto executable = client_->compile(kDonatingAddProgram, portable_compile_options());
  auto b = f32_buffer({10, 20, 30, 40}, device(0));

  auto kept = f32_buffer({1, 2, 3, 4}, device(0));
  ExecuteResult guarded = executable->execute({kept->raw(), b->raw()}, &device(0), {0});
  guarded.done->await();
  EXPECT_FALSE(kept->is_deleted());
  EXPECT_EQ(read_f32(*kept, 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(read_f32(*guarded.outputs[0], 4), (std::vector<float>{11, 22, 33, 44}));

  auto donated = f32_buffer({1, 2, 3, 4}, device(0));
  ExecuteResult consumed = executable->execute({donated->raw(), b->raw()}, &device(0));
  consumed.done->await();
  std::cout << "donated input is_deleted after execute: " << donated->is_deleted() << "\n";
  // The CPU plugin honours the donation: the input buffer is consumed.
  EXPECT_TRUE(donated->is_deleted());
  EXPECT_EQ(read_f32(*consumed.outputs[0], 4), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_THROW(executable->execute({donated->raw(), b->raw()}, &device(0)), Error);
}

TEST_F(PjrtTest, NonDonatableAllowsPassingOneBufferTwice) {
  auto executable = client_->compile(kDonatingAddProgram, portable_compile_options());
  auto a = f32_buffer({1, 2, 3, 4}, device(0));
  // f(donate(a), a) is rejected by the plugin; marking argument 0 non-donatable makes it legal.
  EXPECT_THROW(executable->execute({a->raw(), a->raw()}, &device(0)), Error);
  ExecuteResult result = executable->execute({a->raw(), a->raw()}, &device(0), {0});
  EXPECT_EQ(read_f32(*result.outputs[0], 4), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_FALSE(a->is_deleted());
}

// Two replicas launched separately, each from its own thread on its own device with one launch
// id (as thread ranks of torch.distributed do), meet in the all-reduce.
TEST_F(PjrtTest, ReplicatedProgramRunsOneLaunchPerDevice) {
  ASSERT_GE(client_->devices().size(), 2u);
  const std::vector<int64_t> ids = {device(1).id(), device(0).id()};  // replica 0 on device 1
  auto executable = client_->compile(kAllReduceProgram, replicated_compile_options(ids));
  for (int launch_id : {7, 8}) {
    auto a = f32_buffer({1, 2, 3, 4}, device(1));
    auto b = f32_buffer({10, 20, 30, 40}, device(0));
    auto run = [&](const Buffer* in, const Device* dev) {
      ExecuteResult r = executable->execute({in->raw()}, dev, {}, launch_id);
      r.done->await();
      return read_f32(*r.outputs.at(0), 4);
    };
    auto first = std::async(std::launch::async, run, a.get(), &device(1));
    auto second = std::async(std::launch::async, run, b.get(), &device(0));
    const std::vector<float> sum = {11, 22, 33, 44};
    EXPECT_EQ(first.get(), sum);
    EXPECT_EQ(second.get(), sum);
  }
}

TEST_F(PjrtTest, PortableExecutableNeedsAnExplicitDevice) {
  // A portable executable has no device assignment, so the CPU plugin refuses a launch
  // without execute_device.
  auto executable = client_->compile(kAddProgram, portable_compile_options());
  auto a = f32_buffer({1, 2, 3, 4}, device(0));
  EXPECT_THROW(executable->execute({a->raw(), a->raw()}, nullptr), Error);
}

TEST_F(PjrtTest, DeleteStorageMarksTheBufferDeleted) {
  auto buffer = f32_buffer({1, 2, 3, 4}, device(0));
  buffer->delete_storage();
  EXPECT_TRUE(buffer->is_deleted());
  std::vector<float> out(4);
  EXPECT_THROW(buffer->to_host(out.data(), out.size() * sizeof(float)), Error);
}

// ---- multi-process pieces: the key-value callbacks, the plugins' process options, the
// transport plan (no second process or TPU/GPU plugin here: each is tested alone) ----

// An in-memory KvStore: get() waits on a condition variable, as a c10d store's wait does.
class MemoryKvStore final : public KvStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      throw KvTimeout("no " + key + " in time");
    }
    return values_.at(key);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  void put(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = value;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// The plugin's side of the callbacks (pjrt::call_kv_*), with the last error code of this thread.
thread_local PJRT_Error_Code callback_code = PJRT_Error_Code_OK;
std::optional<std::string> plugin_get(KvStore& store, const std::string& key, int timeout_ms) {
  KvCallOutcome o = call_kv_get(store, key, timeout_ms);
  callback_code = o.code;
  return o.value;
}

std::optional<std::string> plugin_try_get(KvStore& store, const std::string& key) {
  KvCallOutcome o = call_kv_try_get(store, key);
  callback_code = o.code;
  return o.value;
}

void plugin_put(KvStore& store, const std::string& key, const std::string& value) {
  KvCallOutcome o = call_kv_put(store, key, value);
  ASSERT_TRUE(o.ok()) << o.message;
}

TEST(PjrtKvStore, GetBlocksUntilPutTryGetDoesNot) {
  MemoryKvStore store;
  EXPECT_EQ(plugin_try_get(store, "topology/1"), std::nullopt);
  EXPECT_EQ(callback_code, PJRT_Error_Code_NOT_FOUND);
  auto waiting =
      std::async(std::launch::async, [&] { return plugin_get(store, "topology/1", 20000); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  // Binary values (a serialized topology) pass unchanged.
  const std::string value("\0\x01topology\xff", 12);
  plugin_put(store, "topology/1", value);
  EXPECT_EQ(waiting.get(), value);
  EXPECT_EQ(plugin_try_get(store, "topology/1"), value);
}

TEST(PjrtKvStore, GetTimesOutWithDeadlineExceeded) {
  MemoryKvStore store;
  EXPECT_EQ(plugin_get(store, "never", 50), std::nullopt);
  EXPECT_EQ(callback_code, PJRT_Error_Code_DEADLINE_EXCEEDED);
}

TEST(PjrtKvStore, ConcurrentCallsFromManyThreads) {
  // The plugin calls from a pool: each thread waits for its neighbour's key, then puts its own.
  MemoryKvStore store;
  constexpr int kThreads = 8;
  std::vector<std::future<std::optional<std::string>>> got;
  for (int t = 0; t < kThreads; ++t) {
    got.push_back(std::async(std::launch::async, [&store, t] {
      auto v = t == 0 ? std::optional<std::string>("start")
                      : plugin_get(store, "k" + std::to_string(t - 1), 20000);
      plugin_put(store, "k" + std::to_string(t), "v" + std::to_string(t));
      return v;
    }));
  }
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(got[t].get(), "v" + std::to_string(t - 1));
}

TEST(PjrtKvStore, AStoreErrorBecomesThePluginsError) {
  struct Broken final : KvStore {
    std::string get(const std::string&, std::chrono::milliseconds) override {
      throw std::runtime_error("connection reset");
    }
    std::optional<std::string> try_get(const std::string&) override {
      throw std::runtime_error("connection reset");
    }
    void put(const std::string&, const std::string&) override {}
  } broken;
  EXPECT_EQ(plugin_get(broken, "k", 10), std::nullopt);
  EXPECT_EQ(callback_code, PJRT_Error_Code_INTERNAL);
  EXPECT_EQ(plugin_try_get(broken, "k"), std::nullopt);
  EXPECT_EQ(callback_code, PJRT_Error_Code_INTERNAL);
}

TEST_F(PjrtTest, ClientCreatesWithTheKeyValueCallbacks) {
  // The XLA CPU plugin takes the callbacks and never calls them (no cross-process collectives):
  // creation still works, with the same devices.
  MemoryKvStore store;
  auto client = Client::create(plugin_, {{"cpu_device_count", int64_t{2}}}, &store);
  EXPECT_EQ(client->devices().size(), 2u);
  EXPECT_EQ(store.try_get("anything"), std::nullopt);
}

TEST(PjrtProcessOptions, TpuOneChipPerProcessAsTorchXlaSetsIt) {
  ProcessPlace place;
  place.local_rank = 3;
  place.local_world_size = 4;
  auto env = tpu_process_env(place, default_host_chip_bounds(4), {"localhost"});
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["TPU_VISIBLE_CHIPS"], "3");
  EXPECT_EQ(m["TPU_CHIPS_PER_PROCESS_BOUNDS"], "1,1,1");
  EXPECT_EQ(m["TPU_PROCESS_BOUNDS"], "2,2,1");
  EXPECT_EQ(m["TPU_PROCESS_ADDRESSES"],
            "localhost:8476,localhost:8477,localhost:8478,localhost:8479");
  EXPECT_EQ(m["TPU_PROCESS_PORT"], "8479");
  EXPECT_EQ(m["CLOUD_TPU_TASK_ID"], "3");
  // Two hosts of a v5e-16: hosts stack along y, tasks count across hosts.
  place.local_rank = 1;
  place.local_world_size = 8;
  place.node_rank = 1;
  place.num_nodes = 2;
  env = tpu_process_env(place, default_host_chip_bounds(8), {"10.0.0.1", "10.0.0.2"}, 9000);
  m = std::map<std::string, std::string>(env.begin(), env.end());
  EXPECT_EQ(m["TPU_PROCESS_BOUNDS"], "2,8,1");
  EXPECT_EQ(m["CLOUD_TPU_TASK_ID"], "9");
  EXPECT_EQ(m["TPU_PROCESS_PORT"], "9001");
  EXPECT_EQ(m["TPU_PROCESS_ADDRESSES"].rfind("10.0.0.2:9007"),
            m["TPU_PROCESS_ADDRESSES"].size() - std::string("10.0.0.2:9007").size());
}

TEST(PjrtProcessOptions, TpuLayoutThatCannotBeRaises) {
  ProcessPlace place;
  place.local_world_size = 3;
  EXPECT_THROW(default_host_chip_bounds(3), std::invalid_argument);
  EXPECT_THROW(tpu_process_env(place, default_host_chip_bounds(4), {"localhost"}),
               std::invalid_argument);
  place.local_world_size = 4;
  place.num_nodes = 2;
  EXPECT_THROW(tpu_process_env(place, default_host_chip_bounds(4), {"only-one"}),
               std::invalid_argument);
}

TEST(PjrtProcessOptions, GpuVisibleDevicesNodeIdAndCount) {
  ProcessPlace place;
  place.local_rank = 1;
  place.local_world_size = 2;
  place.node_rank = 1;
  place.num_nodes = 2;
  auto local = gpu_process_options(place, {1}, false);
  EXPECT_EQ(std::get<std::vector<int64_t>>(local.at("visible_devices")), std::vector<int64_t>{1});
  EXPECT_EQ(local.count("node_id"), 0u);
  auto world = gpu_process_options(place, {1}, true);
  EXPECT_EQ(std::get<int64_t>(world.at("node_id")), 3);  // processes, not hosts, are nodes
  EXPECT_EQ(std::get<int64_t>(world.at("num_nodes")), 4);
}

RankEntry rank_entry(std::string process, int index, int64_t id, std::string world = "") {
  RankEntry e;
  e.process = std::move(process);
  e.device_index = index;
  e.device_id = id;
  e.world = std::move(world);
  return e;
}

TEST(PjrtWorld, ThreadRanksOfOneProcessRunInProgram) {
  auto plan = plan_transport({rank_entry("p", 0, 0), rank_entry("p", 1, 1)}, "why");
  EXPECT_EQ(plan.kind, TransportPlan::kInProcess);
  EXPECT_EQ(plan.devices, (std::vector<int64_t>{0, 1}));
  plan = plan_transport({rank_entry("p", 1, 1), rank_entry("p", 1, 1)}, "why");
  EXPECT_EQ(plan.kind, TransportPlan::kHost);
  EXPECT_NE(plan.why.find("share tpu:1"), std::string::npos) << plan.why;
}

TEST(PjrtWorld, ProcessesOfOneWorldMapRanksToGlobalDeviceIds) {
  // A fake 2-host world: each process owns one device, numbered tpu:LOCAL_RANK, whose global id
  // the client reports; rank order, not device order, sets the replica order.
  auto plan = plan_transport({rank_entry("a", 0, 4, "w"), rank_entry("b", 1, 5, "w"),
                              rank_entry("c", 0, 0, "w"), rank_entry("d", 1, 1, "w")},
                             "why");
  EXPECT_EQ(plan.kind, TransportPlan::kProcessWorld);
  EXPECT_EQ(plan.devices, (std::vector<int64_t>{4, 5, 0, 1}));
  plan = plan_transport({rank_entry("a", 0, 4, "w"), rank_entry("b", 0, 4, "w")}, "why");
  EXPECT_EQ(plan.kind, TransportPlan::kHost);
  EXPECT_NE(plan.why.find("share PJRT device 4"), std::string::npos) << plan.why;
}

TEST(PjrtWorld, ProcessesWithoutOneWorldStageThroughTheHostAndSayWhy) {
  const std::string cpu = "the XLA CPU plugin has no cross-process collectives";
  auto plan = plan_transport({rank_entry("a", 0, 0), rank_entry("b", 1, 1)}, cpu);
  EXPECT_EQ(plan.kind, TransportPlan::kHost);
  EXPECT_NE(plan.why.find(cpu), std::string::npos) << plan.why;
  plan = plan_transport({rank_entry("a", 0, 0, "w1"), rank_entry("b", 0, 1, "w2")}, cpu);
  EXPECT_EQ(plan.kind, TransportPlan::kHost);
  auto host = rank_entry("a", 0, 0, "w");
  host.wants_host = true;
  plan = plan_transport({host, rank_entry("b", 1, 1, "w")}, cpu);
  EXPECT_EQ(plan.why, "TORCHTPU_COLLECTIVES=host");
  plan = plan_transport({rank_entry("a", 0, -1, "w"), rank_entry("b", 1, 1, "w")}, cpu);
  EXPECT_EQ(plan.kind, TransportPlan::kHost);
  EXPECT_NE(plan.why.find("does not have"), std::string::npos) << plan.why;
}

// ---- PJRT's profiler extension (pjrt/profiler_extension.h) ----
namespace {

// A protobuf writer for the XSpace test input.
std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
  return s;
}
std::string int_field(int field, int64_t v) {
  return varint(static_cast<uint64_t>(field) << 3) + varint(static_cast<uint64_t>(v));
}
std::string bytes_field(int field, const std::string& b) {
  return varint((static_cast<uint64_t>(field) << 3) | 2) + varint(b.size()) + b;
}

// A fake plugin profiler: records calls, collects a fixed buffer, fails start on request.
struct FakeProfilerState {
  int created = 0, started = 0, stopped = 0, destroyed = 0;
  bool fail_start = false;
  std::string data = "xspace bytes";
} fake;
struct FakeError {
  std::string message;
};
plugin_profiler::Profiler* const kFakeHandle = reinterpret_cast<plugin_profiler::Profiler*>(0x1);
plugin_profiler::Api fake_api() {
  plugin_profiler::Api api{};
  api.struct_size = sizeof(api);
  api.error_destroy = [](plugin_profiler::ErrorDestroyArgs* a) {
    delete reinterpret_cast<FakeError*>(a->error);
  };
  api.error_message = [](plugin_profiler::ErrorMessageArgs* a) {
    const auto* e = reinterpret_cast<const FakeError*>(a->error);
    a->message = e->message.data();
    a->message_size = e->message.size();
  };
  api.error_get_code = [](plugin_profiler::ErrorGetCodeArgs* a) -> plugin_profiler::Error* {
    a->code = 9;
    return nullptr;
  };
  api.create = [](plugin_profiler::CreateArgs* a) -> plugin_profiler::Error* {
    ++fake.created;
    a->profiler = kFakeHandle;
    return nullptr;
  };
  api.destroy = [](plugin_profiler::ProfilerArgs*) -> plugin_profiler::Error* {
    ++fake.destroyed;
    return nullptr;
  };
  api.start = [](plugin_profiler::ProfilerArgs*) -> plugin_profiler::Error* {
    if (fake.fail_start) {
      return reinterpret_cast<plugin_profiler::Error*>(new FakeError{"no device tracer"});
    }
    ++fake.started;
    return nullptr;
  };
  api.stop = [](plugin_profiler::ProfilerArgs*) -> plugin_profiler::Error* {
    ++fake.stopped;
    return nullptr;
  };
  api.collect_data = [](plugin_profiler::CollectDataArgs* a) -> plugin_profiler::Error* {
    if (a->buffer != nullptr) std::memcpy(a->buffer, fake.data.data(), fake.data.size());
    a->buffer_size_in_bytes = fake.data.size();
    return nullptr;
  };
  return api;
}

}  // namespace

// The XLA CPU plugin has no profiler extension: the lookup's absent path on a real chain.
TEST_F(PjrtTest, TheCpuPluginHasNoProfilerExtension) {
  const PJRT_Extension_Base* chain = plugin_->api()->extension_start;
  EXPECT_EQ(find_profiler_api(chain), nullptr);
  std::vector<int> types = extension_types(chain);
  EXPECT_FALSE(types.empty());  // layouts, FFI, memory descriptions, phase compile
  for (int t : types) EXPECT_NE(t, static_cast<int>(PJRT_Extension_Type_Profiler));
}

// What a GPU or TPU plugin's chain looks like: the profiler extension among others.
TEST(ProfilerExtension, FoundInAChainAndRefusedWhenTooSmall) {
  plugin_profiler::Api api = fake_api();
  PJRT_Extension_Base last{sizeof(PJRT_Extension_Base), PJRT_Extension_Type_Layouts, nullptr};
  ProfilerExtension profiler{
      {sizeof(ProfilerExtension), PJRT_Extension_Type_Profiler, &last}, &api, 0};
  PJRT_Extension_Base first{sizeof(PJRT_Extension_Base), PJRT_Extension_Type_FFI, &profiler.base};
  EXPECT_EQ(find_profiler_api(&first), &api);
  EXPECT_EQ(extension_types(&first),
            (std::vector<int>{PJRT_Extension_Type_FFI, PJRT_Extension_Type_Profiler,
                              PJRT_Extension_Type_Layouts}));
  EXPECT_EQ(find_profiler_api(&last), nullptr);
  EXPECT_EQ(find_profiler_api(nullptr), nullptr);
  profiler.base.struct_size = sizeof(PJRT_Extension_Base);  // an extension without its api
  EXPECT_EQ(find_profiler_api(&first), nullptr);
  profiler.base.struct_size = sizeof(ProfilerExtension);
  api.struct_size = offsetof(plugin_profiler::Api, collect_data);  // an older, shorter api
  EXPECT_EQ(find_profiler_api(&first), nullptr);
  profiler.profiler_api = nullptr;
  EXPECT_EQ(find_profiler_api(&first), nullptr);
}

TEST(ProfilerExtension, DeviceProfilerDrivesThePluginProfiler) {
  plugin_profiler::Api api = fake_api();
  fake = FakeProfilerState();
  {
    DeviceProfiler p(&api);
    p.start();
    EXPECT_EQ(p.stop_and_collect(), "xspace bytes");
    EXPECT_EQ(fake.started, 1);
    EXPECT_EQ(fake.stopped, 1);
  }
  EXPECT_EQ(fake.created, 1);
  EXPECT_EQ(fake.destroyed, 1);
  fake.fail_start = true;
  DeviceProfiler failing(&api);
  try {
    failing.start();
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PLUGIN_Profiler_Start: no device tracer"),
              std::string::npos);
    EXPECT_EQ(e.code(), 9);
  }
  EXPECT_THROW(DeviceProfiler(nullptr), Error);
}

TEST(ProfilerExtension, DeviceEventsFromAnXSpace) {
  const std::string meta =
      bytes_field(4, int_field(1, 7) + bytes_field(2, int_field(1, 7) + bytes_field(2, "fusion.3") +
                                                          bytes_field(4, "add_relu")));
  const std::string event = int_field(1, 7) + int_field(2, 2500000) + int_field(3, 1500000);
  const std::string aggregate = int_field(1, 7) + int_field(5, 12) + int_field(3, 9000);
  const std::string line = bytes_field(2, "XLA Ops") + int_field(3, 1000000000) +
                           bytes_field(4, event) + bytes_field(4, aggregate);
  const std::string gpu = bytes_field(2, "/device:GPU:0") + bytes_field(3, line) + meta;
  const std::string host = bytes_field(2, "/host:CPU") + bytes_field(3, line) + meta;
  const std::string xspace = bytes_field(1, host) + bytes_field(1, gpu) + bytes_field(2, "warn");
  std::vector<DeviceEvent> events = device_events(xspace);
  ASSERT_EQ(events.size(), 1u);  // the host plane's and the aggregate are not device spans
  EXPECT_EQ(events[0].plane, "/device:GPU:0");
  EXPECT_EQ(events[0].line, "XLA Ops");
  EXPECT_EQ(events[0].name, "add_relu");
  EXPECT_EQ(events[0].start_ns, 1000002500);
  EXPECT_EQ(events[0].duration_ns, 1500);
  EXPECT_TRUE(device_events("").empty());
  EXPECT_THROW(device_events(bytes_field(1, gpu).substr(0, 20)), Error);
}

}  // namespace
}  // namespace torchtpu::pjrt
