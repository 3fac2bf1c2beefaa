// Golden tests of the lowering table without a PJRT plugin or the tpu device: a lowering needs
// only an op's schema, its argument types and the platform to print its StableHLO, so these pin
// the structure of a few lowerings, among them one that picks its form by the platform.
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lowering/lowering.h"
#include "stablehlo/builder.h"

namespace {

using torchtpu::lowering::LArg;
using torchtpu::lowering::LoweringContext;
using torchtpu::shlo::ElementType;
using torchtpu::shlo::ModuleBuilder;
using torchtpu::shlo::TensorType;

// One schema argument: a tensor of `type`, or None.
struct Arg {
  bool none = false;
  TensorType type;
};

// The module text the table's lowering of `op` builds for these arguments on `platform`.
std::string lower(const char* op, const char* overload, const std::vector<Arg>& args,
                  const TensorType& out, const std::string& platform) {
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
  std::string name = std::string(op) + (*overload ? std::string(".") + overload : "");
  const torchtpu::lowering::LoweringFn* fn = torchtpu::lowering::find_lowering(name);
  EXPECT_NE(fn, nullptr) << name;
  if (fn == nullptr) return "";
  ModuleBuilder m;
  auto& b = m.main();
  std::vector<LArg> largs;
  for (const Arg& a : args) {
    LArg l;
    if (!a.none) {
      l.kind = LArg::Kind::kTensor;
      l.value = b.add_argument(a.type);
    }
    largs.push_back(std::move(l));
  }
  while (largs.size() < handle.schema().arguments().size()) largs.emplace_back();
  LoweringContext ctx(b, handle.schema(), std::move(largs), {out}, platform);
  m.finish((*fn)(ctx));
  return m.str();
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// relu(x) = x < 0 ? 0 : x, a select rather than maximum(x, 0): XLA's maximum drops a NaN on
// CPU, PyTorch's relu keeps it.
TEST(LoweringGolden, ReluSelectsZeroBelowZero) {
  TensorType t(ElementType::kF32, {4});
  std::string text = lower("aten::relu", "", {{false, t}}, t, "cpu");
  EXPECT_TRUE(has(text, "comparison_direction = #stablehlo<comparison_direction LT>")) << text;
  EXPECT_TRUE(has(text, "\"stablehlo.select\"")) << text;
  EXPECT_FALSE(has(text, "\"stablehlo.maximum\"")) << text;
  EXPECT_TRUE(has(text, "-> (tensor<4xf32>)")) << text;
}

// _grouped_mm(self, mat2, offs, bias, out_dtype) with the rows of self grouped: TPU has
// chlo.ragged_dot, other platforms get masked dense products. The platform comes from the
// lowering context, never from the runtime.
TEST(LoweringGolden, GroupedMmPicksItsFormByPlatform) {
  std::vector<Arg> args = {{false, TensorType(ElementType::kF32, {6, 4})},
                           {false, TensorType(ElementType::kF32, {3, 4, 5})},
                           {false, TensorType(ElementType::kS32, {3})},
                           {true, {}},
                           {true, {}}};
  TensorType out(ElementType::kF32, {6, 5});
  std::string tpu = lower("aten::_grouped_mm", "", args, out, "tpu");
  std::string cpu = lower("aten::_grouped_mm", "", args, out, "cpu");
  EXPECT_TRUE(has(tpu, "\"chlo.ragged_dot\"")) << tpu;
  EXPECT_FALSE(has(cpu, "chlo.ragged_dot")) << cpu;
  EXPECT_TRUE(has(cpu, "\"stablehlo.dot_general\"")) << cpu;
  EXPECT_TRUE(has(tpu, "-> (tensor<6x5xf32>)") && has(cpu, "-> (tensor<6x5xf32>)"));
}

TEST(LoweringGolden, EveryOpHasOneEntry) {
  EXPECT_TRUE(torchtpu::lowering::duplicate_lowerings().empty());
  EXPECT_GT(torchtpu::lowering::lowered_op_names().size(), 500u);
}

}  // namespace
