#include "stablehlo/precision.h"

namespace torchtpu::shlo {
namespace {

thread_local std::optional<Precision> current;

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kDefault:
      return "DEFAULT";
    case Precision::kHigh:
      return "HIGH";
    case Precision::kHighest:
      return "HIGHEST";
  }
  return "DEFAULT";
}

F32PrecisionScope::F32PrecisionScope(Precision p) : saved_(current) { current = p; }

F32PrecisionScope::~F32PrecisionScope() { current = saved_; }

std::string f32_precision_attr(const Value& lhs, const Value& rhs) {
  if (!current || lhs.dtype() != ElementType::kF32 || rhs.dtype() != ElementType::kF32) {
    return std::string();
  }
  const std::string p = std::string("#stablehlo<precision ") + precision_name(*current) + ">";
  return ", precision_config = [" + p + ", " + p + "]";
}

}  // namespace torchtpu::shlo
