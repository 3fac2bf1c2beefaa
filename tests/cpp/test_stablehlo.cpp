// The builder's text must be what the StableHLO parser expects; the PJRT tests and the Python
// suite compile these modules for real, here we pin the printed form.
#include <gtest/gtest.h>

#include <cmath>

#include "stablehlo/builder.h"
#include "stablehlo/inspect.h"
#include "stablehlo/ops.h"
#include "stablehlo/precision.h"
#include "stablehlo/user_module.h"

using namespace torchtpu::shlo;

TEST(TensorTypeTest, PrintsShapesAndScalars) {
  EXPECT_EQ(TensorType(ElementType::kF32, {2, 3}).str(), "tensor<2x3xf32>");
  EXPECT_EQ(TensorType(ElementType::kBF16, {}).str(), "tensor<bf16>");
  EXPECT_EQ(TensorType(ElementType::kU8, {0}).str(), "tensor<0xui8>");
  EXPECT_EQ(TensorType(ElementType::kPred, {4}).numel(), 4);
}

TEST(LiteralTest, NonFiniteFloatsUseHexBits) {
  EXPECT_EQ(scalar_literal(INFINITY, ElementType::kF32), "0x7F800000");
  EXPECT_EQ(scalar_literal(-INFINITY, ElementType::kBF16), "0xFF80");
  EXPECT_EQ(scalar_literal(-INFINITY, ElementType::kF16), "0xFC00");
  EXPECT_EQ(scalar_literal(1, ElementType::kPred), "true");
  EXPECT_EQ(scalar_literal_int(-3, ElementType::kS64), "-3");
  EXPECT_EQ(scalar_literal_int(255, ElementType::kU8), "255");
}

TEST(LiteralTest, Float8TypesAndConstants) {
  EXPECT_EQ(TensorType(ElementType::kF8E4M3FN, {2}).str(), "tensor<2xf8E4M3FN>");
  EXPECT_EQ(TensorType(ElementType::kF8E5M2FNUZ, {}).str(), "tensor<f8E5M2FNUZ>");
  EXPECT_TRUE(is_float(ElementType::kF8E5M2) && is_float8(ElementType::kF8E4M3FNUZ));
  EXPECT_FALSE(is_float8(ElementType::kBF16));
  EXPECT_EQ(bit_width(ElementType::kF8E4M3FN), 8);
  // PyTorch's conversions: e4m3fn saturates, e5m2 overflows to inf, fnuz to its NaN (0x80).
  EXPECT_EQ(scalar_literal(1000, ElementType::kF8E4M3FN),
            scalar_literal(448, ElementType::kF8E4M3FN));
  EXPECT_EQ(scalar_literal(1e6, ElementType::kF8E5M2), "0x7C");
  EXPECT_EQ(scalar_literal(300, ElementType::kF8E4M3FNUZ), "0x80");
  EXPECT_EQ(scalar_literal(NAN, ElementType::kF8E4M3FN), "0x7F");
  // An infinity asked for directly (a max/min identity) is the largest finite value where the
  // format has no infinity, never the fnuz NaN.
  EXPECT_EQ(scalar_literal(-INFINITY, ElementType::kF8E4M3FNUZ),
            scalar_literal(-240, ElementType::kF8E4M3FNUZ));
  EXPECT_EQ(scalar_literal(INFINITY, ElementType::kF8E5M2FNUZ),
            scalar_literal(57344, ElementType::kF8E5M2FNUZ));
  EXPECT_EQ(scalar_literal(INFINITY, ElementType::kF8E5M2), "0x7C");
}

TEST(ModuleBuilderTest, AddFunction) {
  ModuleBuilder m;
  auto& f = m.main();
  TensorType t(ElementType::kF32, {4});
  Value a = f.add_argument(t);
  Value b = f.add_argument(t, "tf.aliasing_output = 0 : i32");
  m.finish({f.add(a, b)});
  std::string text = m.str();
  EXPECT_NE(text.find("func.func public @main(%v0: tensor<4xf32>, %v1: tensor<4xf32> "
                      "{tf.aliasing_output = 0 : i32}) -> (tensor<4xf32>)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%v2 = \"stablehlo.add\"(%v0, %v1) : (tensor<4xf32>, tensor<4xf32>) -> "
                      "tensor<4xf32>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"func.return\"(%v2) : (tensor<4xf32>) -> ()"), std::string::npos) << text;
}

TEST(ModuleBuilderTest, ReduceHasRegionAndMultiResultsAreIndexed) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {4, 5}));
  Value i = f.add_argument(TensorType(ElementType::kS64, {4, 5}));
  Value zero = f.constant(0, TensorType(ElementType::kF32, {}));
  Value izero = f.constant_int(0, TensorType(ElementType::kS64, {}));
  auto outs =
      f.reduce({x, i}, {zero, izero}, {1}, [](FunctionBuilder& b, const std::vector<Value>& args) {
        return std::vector<Value>{b.add(args[0], args[2]), b.add(args[1], args[3])};
      });
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].type.str(), "tensor<4xf32>");
  EXPECT_EQ(outs[1].type.str(), "tensor<4xi64>");
  EXPECT_EQ(outs[1].name().substr(outs[1].name().size() - 2), "#1");
  m.finish(outs);
  std::string text = m.str();
  EXPECT_NE(text.find("\"stablehlo.return\""), std::string::npos) << text;
  EXPECT_NE(text.find("dimensions = array<i64: 1>"), std::string::npos) << text;
}

TEST(ModuleBuilderTest, SortHasComparatorOverOperandPairs) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {4, 5}));
  Value i = f.iota(TensorType(ElementType::kS64, {4, 5}), 1);
  size_t nargs = 0;
  std::vector<Value> outs =
      f.sort({x, i}, 1, true, [&](FunctionBuilder& b, const std::vector<Value>& args) {
        nargs = args.size();
        EXPECT_EQ(args[1].type.str(), "tensor<f32>");
        EXPECT_EQ(args[2].type.str(), "tensor<i64>");
        return std::vector<Value>{b.compare(args[0], args[1], CompareDirection::kLT)};
      });
  EXPECT_EQ(nargs, 4u);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].type.str(), "tensor<4x5xi64>");
  m.finish(outs);
  std::string text = m.str();
  EXPECT_NE(text.find("\"stablehlo.sort\""), std::string::npos) << text;
  EXPECT_NE(text.find("dimension = 1 : i64, is_stable = true"), std::string::npos) << text;
  EXPECT_THROW(f.sort({x, f.iota(TensorType(ElementType::kS64, {5}), 0)}, 0, false,
                      [](FunctionBuilder&, const std::vector<Value>& a) {
                        return std::vector<Value>{a[0]};
                      }),
               std::invalid_argument);
}

TEST(ModuleBuilderTest, ShapeHelpersSkipNoOps) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {2, 3}));
  EXPECT_EQ(f.reshape(x, {2, 3}).id, x.id);
  EXPECT_EQ(f.transpose(x, {0, 1}).id, x.id);
  EXPECT_EQ(f.convert(x, ElementType::kF32).id, x.id);
  Value y = f.broadcast_to(f.reshape(x, {1, 2, 3}), {4, 2, 3});
  EXPECT_EQ(y.type.str(), "tensor<4x2x3xf32>");
  Value t = f.transpose(x, {1, 0});
  EXPECT_EQ(t.type.str(), "tensor<3x2xf32>");
  Value s = f.slice(x, {0, 1}, {2, 3}, {1, 1});
  EXPECT_EQ(s.type.str(), "tensor<2x2xf32>");
  Value p = f.pad(x, f.constant(0, TensorType(ElementType::kF32, {})), {1, 0}, {0, 2}, {0, 1});
  EXPECT_EQ(p.type.str(), "tensor<3x7xf32>");
  Value c = f.concatenate({x, x}, 1);
  EXPECT_EQ(c.type.str(), "tensor<2x6xf32>");
  EXPECT_THROW(f.add(x, t), std::invalid_argument);
}

TEST(ModuleBuilderTest, WhileLoopCarriesValuesThroughConditionAndBody) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {3}));
  TensorType it(ElementType::kS64, {});
  Value zero = f.constant_int(0, it);
  // for (i = 0; i < 4; ++i) x = x + x
  std::vector<Value> outs = f.while_loop(
      {zero, x},
      [&](FunctionBuilder& b, const std::vector<Value>& st) {
        return std::vector<Value>{b.compare(st[0], b.constant_int(4, it), CompareDirection::kLT)};
      },
      [&](FunctionBuilder& b, const std::vector<Value>& st) {
        return std::vector<Value>{b.add(st[0], b.constant_int(1, it)), b.add(st[1], st[1])};
      });
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].type.str(), "tensor<3xf32>");
  EXPECT_EQ(outs[1].name(), "%v2#1");
  m.finish({outs[1]});
  const std::string expected =
      "    %v2:2 = \"stablehlo.while\"(%v1, %v0) ({\n"
      "      ^bb0(%v3: tensor<i64>, %v4: tensor<3xf32>):\n"
      "        %v5 = \"stablehlo.constant\"() {value = dense<4> : tensor<i64>} : () -> "
      "tensor<i64>\n"
      "        %v6 = \"stablehlo.compare\"(%v3, %v5) {comparison_direction = "
      "#stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : "
      "(tensor<i64>, tensor<i64>) -> tensor<i1>\n"
      "        \"stablehlo.return\"(%v6) : (tensor<i1>) -> ()\n"
      "    }, {\n"
      "      ^bb0(%v7: tensor<i64>, %v8: tensor<3xf32>):\n"
      "        %v9 = \"stablehlo.constant\"() {value = dense<1> : tensor<i64>} : () -> "
      "tensor<i64>\n"
      "        %v10 = \"stablehlo.add\"(%v7, %v9) : (tensor<i64>, tensor<i64>) -> tensor<i64>\n"
      "        %v11 = \"stablehlo.add\"(%v8, %v8) : (tensor<3xf32>, tensor<3xf32>) -> "
      "tensor<3xf32>\n"
      "        \"stablehlo.return\"(%v10, %v11) : (tensor<i64>, tensor<3xf32>) -> ()\n"
      "    }) : (tensor<i64>, tensor<3xf32>) -> (tensor<i64>, tensor<3xf32>)\n"
      "    \"func.return\"(%v2#1) : (tensor<3xf32>) -> ()\n";
  std::string text = m.str();
  EXPECT_NE(text.find(expected), std::string::npos) << text;
}

TEST(ModuleBuilderTest, WhileLoopRejectsMistypedRegions) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {3}));
  auto yes = [](FunctionBuilder& b, const std::vector<Value>&) {
    return std::vector<Value>{b.constant(1, TensorType(ElementType::kPred, {}))};
  };
  auto same = [](FunctionBuilder&, const std::vector<Value>& st) { return st; };
  // The condition must be a scalar i1.
  EXPECT_THROW(f.while_loop({x}, same, same), std::invalid_argument);
  // The body must keep the carried types.
  EXPECT_THROW(f.while_loop({x}, yes,
                            [](FunctionBuilder& b, const std::vector<Value>& st) {
                              return std::vector<Value>{b.convert(st[0], ElementType::kF64)};
                            }),
               std::invalid_argument);
  EXPECT_EQ(f.while_loop({x}, yes, same).at(0).type.str(), "tensor<3xf32>");
}

// A module as JAX exports it: attributes, locations with #loc aliases, result attributes, a
// private helper; the parser keeps the functions, renames them, and reads the entry signature.
TEST(UserModuleTest, ParsesAndRenamesAnExportedModule) {
  const char* text = R"(#loc1 = loc("x")
module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32> loc("x"), %arg1: tensor<2x3xbf16>) -> (tensor<4xf32> {jax.result_info = "result[0]"}, tensor<i1>) {
    %0 = call @helper(%arg0) : (tensor<4xf32>) -> tensor<4xf32> loc(#loc1)
    %c = stablehlo.constant dense<true> : tensor<i1>
    return %0, %c : tensor<4xf32>, tensor<i1>
  } loc(#loc)
  func.func private @helper(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.sine %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
#loc = loc(unknown)
)";
  UserModule m = parse_user_module(text, "user_1");
  ASSERT_EQ(m.arg_types.size(), 2u);
  EXPECT_EQ(m.arg_types[0].str(), "tensor<4xf32>");
  EXPECT_EQ(m.arg_types[1].str(), "tensor<2x3xbf16>");
  ASSERT_EQ(m.result_types.size(), 2u);
  EXPECT_EQ(m.result_types[1].str(), "tensor<i1>");
  EXPECT_EQ(m.entry, "user_1_main");
  EXPECT_NE(m.functions.find("func.func private @user_1_main("), std::string::npos);
  EXPECT_NE(m.functions.find("call @user_1_helper(%arg0)"), std::string::npos);
  EXPECT_EQ(m.functions.find("loc("), std::string::npos);
  EXPECT_EQ(m.functions.find("public"), std::string::npos);
  EXPECT_NE(m.functions.find("\"result[0]\""), std::string::npos);
}

TEST(UserModuleTest, RejectsWhatTorchCannotPass) {
  EXPECT_THROW(parse_user_module("module {}", "p"), std::invalid_argument);
  EXPECT_THROW(parse_user_module("func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> { "
                                 "return %a : tensor<?xf32> }",
                                 "p"),
               std::invalid_argument);
  EXPECT_THROW(parse_tensor_type("tensor<4xf8E4M3FN>"), std::invalid_argument);
  EXPECT_EQ(parse_tensor_type("tensor<2x2xcomplex<f32>>").str(), "tensor<2x2xcomplex<f32>>");
}

// A module calling a user's function keeps one copy of it, after @main.
TEST(ModuleBuilderTest, ModuleFunctionsFollowMainOnce) {
  ModuleBuilder mb;
  auto& f = mb.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {2}));
  const std::string fn =
      "  func.func private @u_main(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n"
      "    return %arg0 : tensor<2xf32>\n  }\n";
  add_module_functions("u_main", fn);
  add_module_functions("u_main", fn);
  Value y = f.op_multi("func.call", {x}, {x.type}, "callee = @u_main").at(0);
  mb.finish({y});
  std::string s = mb.str();
  EXPECT_NE(s.find("\"func.call\"(%v0) {callee = @u_main}"), std::string::npos);
  EXPECT_EQ(s.find("@u_main(%arg0"), s.rfind("@u_main(%arg0"));
  EXPECT_LT(s.find("func.func public @main"), s.find("func.func private @u_main"));
}

// The typed structured ops derive their result types and print their attributes
// themselves.
TEST(TypedOpsTest, GatherAndScatterPrintTheirDimensionNumbers) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {5, 3}));
  Value idx = f.add_argument(TensorType(ElementType::kS64, {4, 1}));
  Value g = f.gather(x, idx, {{1}, {0}, {0}, 1}, {1, 3}, TensorType(ElementType::kF32, {4, 3}));
  Value s = f.scatter(x, idx, g, {{1}, {0}, {0}, 1},
                      [](FunctionBuilder& b, const std::vector<Value>& a) -> std::vector<Value> {
                        return {b.add(a[0], a[1])};
                      });
  m.finish({s});
  std::string text = m.str();
  EXPECT_NE(text.find("#stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], "
                      "start_index_map = [0], index_vector_dim = 1>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("#stablehlo.scatter<update_window_dims = [1], "
                      "inserted_window_dims = [0], "
                      "scatter_dims_to_operand_dims = [0], index_vector_dim = 1>"),
            std::string::npos)
      << text;
}

TEST(TypedOpsTest, ResultTypesFollowFromTheAttributes) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(ElementType::kF32, {2, 8}));
  // An inclusive scan: padding n - 1 low keeps the length.
  Window scan{{1, 8}, {1, 1}, {}, {}, {{0, 0}, {7, 0}}};
  Value zero = f.constant(0, TensorType(ElementType::kF32, {}));
  auto add = [](FunctionBuilder& b, const std::vector<Value>& a) -> std::vector<Value> {
    return {b.add(a[0], a[1])};
  };
  EXPECT_EQ(reduce_window(f, {x}, {zero}, scan, add)[0].shape(), (std::vector<int64_t>{2, 8}));
  // Windows of 3 with stride 2 and dilation 2 (span 5): (8 - 5) / 2 + 1 = 2.
  Window pool{{1, 3}, {1, 2}, {}, {1, 2}, {}};
  EXPECT_EQ(reduce_window(f, {x}, {zero}, pool, add)[0].shape(), (std::vector<int64_t>{2, 2}));
  Value r = fft(f, x, FftType::kRfft, 8);
  EXPECT_EQ(r.type, TensorType(ElementType::kC64, {2, 5}));
  EXPECT_EQ(fft(f, r, FftType::kIrfft, 8).type, TensorType(ElementType::kF32, {2, 8}));
  EXPECT_EQ(abs(f, r).type, TensorType(ElementType::kF32, {2, 5}));
  EXPECT_EQ(complex(f, real(f, r), imag(f, r)).type, r.type);
  EXPECT_EQ(is_finite(f, x).type, TensorType(ElementType::kPred, {2, 8}));
  EXPECT_EQ(dynamic_slice(f, x,
                          {f.constant_int(0, TensorType(ElementType::kS64, {})),
                           f.constant_int(2, TensorType(ElementType::kS64, {}))},
                          {2, 3})
                .shape(),
            (std::vector<int64_t>{2, 3}));
}

namespace {

std::string scatter_module(ElementType t, bool add) {
  ModuleBuilder m;
  auto& f = m.main();
  Value x = f.add_argument(TensorType(t, {5, 3}));
  Value idx = f.add_argument(TensorType(ElementType::kS64, {4, 1}));
  Value u = f.add_argument(TensorType(t, {4, 3}));
  Value s = f.scatter(x, idx, u, {{1}, {0}, {0}, 1},
                      [add](FunctionBuilder& b, const std::vector<Value>& a) -> std::vector<Value> {
                        return {add ? b.add(a[0], a[1]) : a[1]};
                      });
  m.finish({s});
  return m.str();
}

}  // namespace

// What XLA:GPU runs with atomics: float accumulation. Integer sums are exact in any order and a
// replacing scatter adds nothing up.
TEST(InspectTest, CountsFloatAccumulatingScatters) {
  EXPECT_EQ(accumulating_float_scatters(scatter_module(ElementType::kF32, true)), 1);
  EXPECT_EQ(accumulating_float_scatters(scatter_module(ElementType::kBF16, true)), 1);
  EXPECT_EQ(accumulating_float_scatters(scatter_module(ElementType::kS64, true)), 0);
  EXPECT_EQ(accumulating_float_scatters(scatter_module(ElementType::kF32, false)), 0);
  EXPECT_EQ(accumulating_float_scatters(scatter_module(ElementType::kF32, true) +
                                        scatter_module(ElementType::kF16, true)),
            2);
  EXPECT_EQ(accumulating_float_scatters("module {}"), 0);
}

namespace {

// A module of `body` over two 4x3 arguments of type `t`, returning its value.
template <class Body>
std::string module_of(ElementType t, Body body) {
  ModuleBuilder m;
  auto& f = m.main();
  Value a = f.add_argument(TensorType(t, {4, 3}));
  Value b = f.add_argument(TensorType(t, {4, 3}));
  m.finish({body(f, a, b)});
  return m.str();
}

}  // namespace

// What LLVM may fuse into one multiply-add when it optimizes (XLA:CPU's level-0 programs do not):
// a float product reaching a sum through ops that hand it on unrounded.
TEST(InspectTest, FindsProductsThatMayFuseIntoSums) {
  using F = FunctionBuilder;
  const auto fuses = [](ElementType t, auto body) {
    return product_may_fuse_into_sum(module_of(t, body));
  };
  EXPECT_TRUE(
      fuses(ElementType::kF32, [](F& f, Value a, Value b) { return f.add(f.mul(a, b), b); }));
  EXPECT_TRUE(fuses(ElementType::kBF16, [](F& f, Value a, Value b) {
    return f.sub(b, f.neg(f.transpose(f.reshape(f.mul(a, b), {3, 4}), {1, 0})));
  }));
  EXPECT_TRUE(fuses(ElementType::kF32, [](F& f, Value a, Value b) {
    return f.add(f.convert(f.mul(a, b), ElementType::kF64), f.convert(b, ElementType::kF64));
  }));
  EXPECT_TRUE(fuses(ElementType::kF32, [](F& f, Value a, Value b) {
    Value zero = f.constant(0, TensorType(ElementType::kF32, {}));
    return f.reduce_simple(f.mul(a, b), zero, {1}, "stablehlo.add");
  }));
  EXPECT_TRUE(fuses(ElementType::kF32, [](F& f, Value a, Value b) {
    return f.add(f.dot_general(a, f.transpose(b, {1, 0}), {}, {}, {1}, {0},
                               TensorType(ElementType::kF32, {4, 4})),
                 f.constant(1, TensorType(ElementType::kF32, {4, 4})));
  }));
  // Rounded between (a divide, an exp, a max), or never summed: the same bits at any level.
  EXPECT_FALSE(fuses(ElementType::kF32, [](F& f, Value a, Value b) {
    return f.add(f.div(f.mul(a, b), b), f.max(f.mul(a, a), b));
  }));
  EXPECT_FALSE(fuses(ElementType::kF32,
                     [](F& f, Value a, Value b) { return f.mul(f.add(a, b), f.sub(a, b)); }));
  EXPECT_FALSE(fuses(ElementType::kF32, [](F& f, Value a, Value b) {
    return f.add(f.unary("stablehlo.exponential", f.mul(a, b)), b);
  }));
  // Integer products are exact.
  EXPECT_FALSE(
      fuses(ElementType::kS32, [](F& f, Value a, Value b) { return f.add(f.mul(a, b), b); }));
  EXPECT_FALSE(product_may_fuse_into_sum("module {}"));
}

// torch.set_float32_matmul_precision reaches every f32 product of the module, regions included,
// and no product of another element type.
TEST(TypedOpsTest, F32ProductsCarryTheModulePrecision) {
  for (Precision p : {Precision::kDefault, Precision::kHigh, Precision::kHighest}) {
    F32PrecisionScope scope(p);
    ModuleBuilder m;
    auto& f = m.main();
    Value a = f.add_argument(TensorType(ElementType::kF32, {2, 3}));
    Value b = f.add_argument(TensorType(ElementType::kF32, {3, 4}));
    Value h = f.add_argument(TensorType(ElementType::kBF16, {2, 3}));
    Value hb = f.add_argument(TensorType(ElementType::kBF16, {3, 4}));
    Value d = f.dot_general(a, b, {}, {}, {1}, {0}, TensorType(ElementType::kF32, {2, 4}));
    Value dh = f.dot_general(h, hb, {}, {}, {1}, {0}, TensorType(ElementType::kF32, {2, 4}));
    std::vector<Value> looped = f.while_loop(
        {d},
        [](FunctionBuilder& r, const std::vector<Value>& v) -> std::vector<Value> {
          (void)v;
          return {r.constant(0, TensorType(ElementType::kPred, {}))};
        },
        [&](FunctionBuilder& r, const std::vector<Value>& v) -> std::vector<Value> {
          Value sq = r.dot_general(v[0], r.transpose(v[0], {1, 0}), {}, {}, {1}, {0},
                                   TensorType(ElementType::kF32, {2, 2}));
          return {r.dot_general(sq, v[0], {}, {}, {1}, {0}, TensorType(ElementType::kF32, {2, 4}))};
        });
    m.finish({looped[0], dh});
    const std::string text = m.str();
    const std::string attr = std::string("precision_config = [#stablehlo<precision ") +
                             precision_name(p) + ">, #stablehlo<precision " + precision_name(p) +
                             ">]";
    size_t n = 0;
    for (size_t at = text.find(attr); at != std::string::npos; at = text.find(attr, at + 1)) ++n;
    EXPECT_EQ(n, 3u) << text;  // the f32 product and the loop body's two; not the bf16 one
  }
  ModuleBuilder unset;
  Value a = unset.main().add_argument(TensorType(ElementType::kF32, {2, 3}));
  Value b = unset.main().add_argument(TensorType(ElementType::kF32, {3, 4}));
  unset.finish(
      {unset.main().dot_general(a, b, {}, {}, {1}, {0}, TensorType(ElementType::kF32, {2, 4}))});
  EXPECT_EQ(unset.str().find("precision_config"), std::string::npos);  // no scope, no attribute
}
