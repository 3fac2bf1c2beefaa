// torch.set_float32_matmul_precision as StableHLO: the precision_config of the f32 products
// (dot_general, convolution) of the module being built on this thread. The engine opens a
// F32PrecisionScope around each build (exec/program.cpp) with torch's setting of the call, so
// every lowering's products, in regions too, carry it without any lowering asking; outside a
// scope the builder prints no attribute (XLA's DEFAULT).
#pragma once

#include <optional>
#include <string>

#include "stablehlo/builder.h"

namespace torchtpu::shlo {

// How many bf16 passes an f32 product may take: TPU takes one for DEFAULT and three for HIGH;
// XLA:GPU may use TF32 for both; HIGHEST is f32. XLA:CPU computes f32 for all three.
enum class Precision { kDefault, kHigh, kHighest };
const char* precision_name(Precision p);  // "DEFAULT", "HIGH", "HIGHEST"

class F32PrecisionScope {
 public:
  explicit F32PrecisionScope(Precision p);
  ~F32PrecisionScope();
  F32PrecisionScope(const F32PrecisionScope&) = delete;
  F32PrecisionScope& operator=(const F32PrecisionScope&) = delete;

 private:
  std::optional<Precision> saved_;
};

// ", precision_config = [p, p]" for a product of two f32 operands inside a scope, else "":
// torch's setting is about float32 matmuls only (bf16 products accumulate in f32 anyway).
std::string f32_precision_attr(const Value& lhs, const Value& rhs);

}  // namespace torchtpu::shlo
