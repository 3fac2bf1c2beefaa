// The rule that picks a program's compile effort (runtime::effort_for) and its switches: which
// small eager programs compile light or quick, and which quick ones at LLVM level 0.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

#include "config/config.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include "stablehlo/inspect.h"

namespace torchtpu::runtime {

int light_compile_level() {
  // Opt-in. Light programs upgrade to full effort once hot (Program::upgrade_when_hot), so a
  // loop's steady state keeps full speed, but on XLA:CPU a light and a full program of the same
  // op can differ in the last bits (a multiply-add the full one fuses into an FMA: addcmul, lerp,
  // tanh, erf, gelu, rsqrt, layer_norm), so when an op's results change would depend on when its
  // upgrade lands: not a default.
  static const int level =
      config::flag("TORCHTPU_LIGHT_COMPILE", false)
          ? std::stoi(config::choice("TORCHTPU_LIGHT_COMPILE_LEVEL", {"0", "1"}, "0"))
          : -1;
  return level;
}

int64_t light_upgrade_after() {
  static const int64_t n = [] {
    const std::optional<std::string> v = config::raw("TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER");
    if (v && *v == "0") return int64_t{0};
    return config::positive_int("TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER", 8, int64_t{1} << 40);
  }();
  return n;
}

int64_t light_compile_max_elements() {
  static const int64_t max_elements =
      config::positive_int("TORCHTPU_LIGHT_COMPILE_MAX_ELEMENTS", 65536, int64_t{1} << 40);
  return max_elements;
}

bool quick_compile() {
  static const bool on = config::flag("TORCHTPU_QUICK_COMPILE", true);
  return on;
}

bool quick_compile_o0() {
  static const bool on = config::flag("TORCHTPU_QUICK_COMPILE_O0", true);
  return on;
}

namespace {

// Whether every op of `mlir` is in `ops` (stablehlo ops by their short name, chlo ops by their
// full one). Op names are quoted (the generic form the builder prints): "stablehlo.add"(...).
bool only_ops_in(const std::string& mlir, const std::unordered_set<std::string>& ops) {
  for (size_t at = mlir.find('"'); at != std::string::npos; at = mlir.find('"', at + 1)) {
    const size_t close = mlir.find('"', at + 1);
    if (close == std::string::npos) break;
    const std::string name = mlir.substr(at + 1, close - at - 1);
    at = close;
    if (name.rfind("func.", 0) == 0) continue;
    if (name.rfind("stablehlo.", 0) == 0) {
      if (!ops.count(name.substr(10))) return false;
    } else if (name.rfind("chlo.", 0) == 0) {
      if (!ops.count(name)) return false;
    } else if (name.find('.') != std::string::npos &&
               name.find_first_of(" {}[],=<>()") == std::string::npos) {
      return false;  // another dialect's op
    }
  }
  return true;
}

// Whether every op of a module is one whose values XLA:CPU's elemental and fusion emitters were
// measured to compute bit for bit alike: elementwise math, casts, broadcasts, slices, pads,
// concatenations, gathers and dots, each run by tests/python/test_compile_effort.py's bits test
// (keep the two lists together). Reductions are not (their summation order: an nll_loss differed
// in the last bit), nor is tan, nor any op never checked (scatter, sort, loops, custom calls,
// collectives): a program with one compiles at full effort, so a quick program's values never
// change when it upgrades. Likewise for element types: only those the test covers.
bool emitters_agree_on(const std::string& mlir) {
  static const std::unordered_set<std::string> kAgree = {
      // stablehlo.*
      "abs", "add", "and", "atan2", "broadcast_in_dim", "ceil", "compare", "concatenate",
      "constant", "convert", "cosine", "divide", "dot", "dot_general", "dynamic_slice",
      "dynamic_update_slice", "exponential", "exponential_minus_one", "floor", "gather", "iota",
      "log", "log_plus_one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or",
      "pad", "power", "remainder", "reshape", "reverse", "round_nearest_even", "rsqrt", "select",
      "sign", "sine", "slice", "sqrt", "subtract", "tanh", "transpose", "xor",
      // chlo.* (decomposed into the elementwise ops above before either emitter runs)
      "chlo.asinh", "chlo.atan", "chlo.erf", "chlo.erf_inv", "chlo.erfc"};
  // Casts to and from float8 round differently under the two (tests/python/test_float8.py);
  // complex and sub-byte types were never checked.
  static const char* const kUnchecked[] = {"f8E",   "f4E",   "f6E",  "complex<", "xi4>",  "<i4>",
                                           "xui4>", "<ui4>", "xi2>", "<i2>",     "xui2>", "<ui2>"};
  for (const char* type : kUnchecked) {
    if (mlir.find(type) != std::string::npos) return false;
  }
  return only_ops_in(mlir, kAgree);
}

// Whether `mlir` (a quick program: emitters_agree_on) computes the same bits at LLVM
// optimization level 0 as at full optimization. Without fast-math flags LLVM changes no value
// when it optimizes, with one exception: it fuses a float product and the sum it feeds into one
// fused multiply-add, which rounds once instead of twice (level 0 does not). So: every op rounds
// once per element, computed by one machine instruction or by none (XLA's polynomial
// approximations of exp, tanh, erf, ... and its dot kernels for thin matrices do hold such
// pairs: 14 ops of the bits test and matrix-vector products differed at level 0), and no float
// product reaches a sum (shlo::product_may_fuse_into_sum). Each op here is run by the same bits
// test at level 0. Not dynamic_update_slice either, though exact: an in-place write into a view
// (a whole storage copied around a slice) runs 5-10x slower at level 0 than quick (a 512x8
// slice of a 512x16 tensor: 111 us against 10), too slow even for the few launches before its
// upgrade.
bool exact_at_level_0(const std::string& mlir) {
  // clang-format off
  static const std::unordered_set<std::string> kRoundOnce = {
      "abs", "add", "and", "broadcast_in_dim", "ceil", "compare", "concatenate", "constant",
      "convert", "divide", "dynamic_slice", "floor", "gather", "iota", "maximum", "minimum",
      "multiply", "negate", "not", "or", "pad", "remainder", "reshape", "reverse",
      "round_nearest_even", "select", "sign", "slice", "sqrt", "subtract", "transpose", "xor"};
  // clang-format on
  return only_ops_in(mlir, kRoundOnce) && !shlo::product_may_fuse_into_sum(mlir);
}

}  // namespace

Effort effort_for(ProgramClass cls, int64_t largest_elements, const std::string& mlir) {
  if (cls != ProgramClass::kEagerOp || largest_elements > light_compile_max_elements()) {
    return Effort::kFull;
  }
  if (light_compile_level() >= 0) return Effort::kLight;
  const Runtime& rt = get();
  if (rt.quick_compile_options().empty() || !emitters_agree_on(mlir)) return Effort::kFull;
  if (!rt.quick_o0_compile_options().empty() && exact_at_level_0(mlir)) return Effort::kQuickO0;
  return Effort::kQuick;
}

}  // namespace torchtpu::runtime
