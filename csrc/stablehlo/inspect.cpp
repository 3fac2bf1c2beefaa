#include "stablehlo/inspect.h"

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

}  // namespace

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
