#include "stablehlo/inspect.h"

#include <unordered_set>
#include <vector>

namespace torchtpu::shlo {
namespace {

// The element type of the last "tensor<...>" before `end`: "f32" in "tensor<4x3xf32>".
std::string last_element_type(const std::string& text, size_t end) {
  const size_t open = text.rfind("tensor<", end);
  if (open == std::string::npos) return std::string();
  const size_t close = text.find('>', open);
  if (close == std::string::npos || close > end) return std::string();
  std::string inner = text.substr(open + 7, close - open - 7);
  const size_t x = inner.rfind('x');
  // "4x3xf32" -> "f32"; "f32" (rank 0) has no 'x' before a digit-free tail.
  return x == std::string::npos ? inner : inner.substr(x + 1);
}

bool is_float_element(const std::string& t) {
  return t == "f16" || t == "bf16" || t == "f32" || t == "f64" || t.rfind("f8", 0) == 0;
}

// One op line of the generic form: `%v9 = "stablehlo.subtract"(%v2, %v8) : (...) -> ...`.
struct OpLine {
  std::string result;  // "%v9" ("%v4" for "%v4:2 = "); empty for an op without results
  std::string name;    // "stablehlo.subtract"
  std::vector<std::string> operands;  // "%v2", "%v8" ("%v4" for "%v4#1")
};

bool parse_op_line(const std::string& line, OpLine* op) {
  size_t at = line.find_first_not_of(' ');
  if (at == std::string::npos) return false;
  op->result.clear();
  if (line[at] == '%') {
    const size_t eq = line.find(" = ", at);
    if (eq == std::string::npos) return false;
    op->result = line.substr(at, eq - at);
    const size_t colon = op->result.find(':');
    if (colon != std::string::npos) op->result.resize(colon);
    at = eq + 3;
  }
  if (line[at] != '"') return false;
  const size_t close = line.find('"', at + 1);
  if (close == std::string::npos || close + 1 >= line.size() || line[close + 1] != '(') {
    return false;
  }
  op->name = line.substr(at + 1, close - at - 1);
  const size_t end = line.find(')', close);
  if (end == std::string::npos) return false;
  op->operands.clear();
  for (size_t v = line.find('%', close); v != std::string::npos && v < end;
       v = line.find('%', v + 1)) {
    size_t stop = line.find_first_of(",)# ", v);
    if (stop == std::string::npos || stop > end) stop = end;
    op->operands.push_back(line.substr(v, stop - v));
  }
  return true;
}

}  // namespace

bool product_may_fuse_into_sum(const std::string& module) {
  static const std::unordered_set<std::string> kProducts = {
      "stablehlo.multiply", "stablehlo.dot", "stablehlo.dot_general", "stablehlo.convolution"};
  // Ops that hand a value on unrounded (a sum of their result may still be one FMA with the
  // product under them): data movement, negation (LLVM fuses -(a*b)+c too), selection and
  // converts (LLVM folds a widened product into the sum).
  static const std::unordered_set<std::string> kPassOn = {
      "stablehlo.reshape",       "stablehlo.broadcast_in_dim",
      "stablehlo.transpose",     "stablehlo.slice",
      "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice",
      "stablehlo.concatenate",   "stablehlo.pad",
      "stablehlo.reverse",       "stablehlo.gather",
      "stablehlo.select",        "stablehlo.convert",
      "stablehlo.negate",        "stablehlo.bitcast_convert",
      "stablehlo.copy",          "stablehlo.optimization_barrier"};
  std::unordered_set<std::string> carries_product;  // values that may hold an unrounded product
  OpLine op;
  size_t line_start = 0;
  while (line_start < module.size()) {
    size_t line_end = module.find('\n', line_start);
    if (line_end == std::string::npos) line_end = module.size();
    const std::string line = module.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!parse_op_line(line, &op)) continue;
    bool fed_by_product = false;
    for (const std::string& v : op.operands) fed_by_product |= carries_product.count(v) > 0;
    if (op.name == "stablehlo.add" || op.name == "stablehlo.subtract") {
      if (fed_by_product) return true;
    } else if (op.name == "stablehlo.reduce") {
      // Its body follows up to "})": an adding reduce of products is a dot.
      const size_t body_end = module.find("})", line_start);
      const std::string body = module.substr(line_start, body_end - line_start);
      const bool adds = body.find("stablehlo.add") != std::string::npos ||
                        body.find("stablehlo.subtract") != std::string::npos;
      if (fed_by_product && adds) return true;
    }
    if (op.result.empty()) continue;
    const bool float_product =
        kProducts.count(op.name) && is_float_element(last_element_type(line, line.size()));
    if (float_product || (fed_by_product && kPassOn.count(op.name))) {
      carries_product.insert(op.result);
    }
  }
  return false;
}

int accumulating_float_scatters(const std::string& module) {
  static const std::string kScatter = "\"stablehlo.scatter\"(";
  int count = 0;
  for (size_t at = module.find(kScatter); at != std::string::npos;
       at = module.find(kScatter, at + kScatter.size())) {
    // The op's region runs to its "})", and its result type ends the line after it.
    const size_t region_end = module.find("})", at);
    if (region_end == std::string::npos) break;
    const size_t line_end = module.find('\n', region_end);
    const std::string region = module.substr(at, region_end - at);
    const bool accumulates = region.find("stablehlo.add") != std::string::npos ||
                             region.find("stablehlo.multiply") != std::string::npos;
    const size_t end = line_end == std::string::npos ? module.size() : line_end;
    if (accumulates && is_float_element(last_element_type(module, end))) ++count;
  }
  return count;
}

}  // namespace torchtpu::shlo
