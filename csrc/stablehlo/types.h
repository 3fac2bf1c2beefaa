// Element and tensor types of the StableHLO dialect, printed as MLIR text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torchtpu::shlo {

enum class ElementType {
  kPred,
  kS8,
  kS16,
  kS32,
  kS64,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,   // complex<f32>
  kC128,  // complex<f64>
  // float8 (PyTorch's float8_e4m3fn, float8_e5m2 and their fnuz variants).
  kF8E4M3FN,
  kF8E5M2,
  kF8E4M3FNUZ,
  kF8E5M2FNUZ,
};

// "i1", "i8", ..., "ui8", "f16", "bf16", "f32", "f64", "complex<f32>", "complex<f64>".
const char* mlir_name(ElementType t);
bool is_float(ElementType t);  // float8 types included
bool is_float8(ElementType t);
bool is_signed_int(ElementType t);
bool is_unsigned_int(ElementType t);
inline bool is_integer(ElementType t) { return is_signed_int(t) || is_unsigned_int(t); }
int bit_width(ElementType t);
bool is_complex(ElementType t);
// f32 for complex<f32>, f64 for complex<f64>; other types unchanged.
ElementType complex_component(ElementType t);
// complex<f32> for f32 and narrower floats, complex<f64> for f64; complex types unchanged.
ElementType complex_of(ElementType t);

struct TensorType {
  ElementType dtype = ElementType::kF32;
  std::vector<int64_t> shape;

  TensorType() = default;
  TensorType(ElementType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {}
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  // "tensor<2x3xf32>", "tensor<f32>" for rank 0.
  std::string str() const;
  TensorType with_dtype(ElementType d) const { return TensorType(d, shape); }
  TensorType with_shape(std::vector<int64_t> s) const { return TensorType(dtype, std::move(s)); }
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

}  // namespace torchtpu::shlo
