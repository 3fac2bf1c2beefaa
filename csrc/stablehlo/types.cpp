#include "stablehlo/types.h"

namespace torchtpu::shlo {

const char* mlir_name(ElementType t) {
  switch (t) {
    case ElementType::kPred:
      return "i1";
    case ElementType::kS8:
      return "i8";
    case ElementType::kS16:
      return "i16";
    case ElementType::kS32:
      return "i32";
    case ElementType::kS64:
      return "i64";
    case ElementType::kU8:
      return "ui8";
    case ElementType::kU16:
      return "ui16";
    case ElementType::kU32:
      return "ui32";
    case ElementType::kU64:
      return "ui64";
    case ElementType::kF16:
      return "f16";
    case ElementType::kBF16:
      return "bf16";
    case ElementType::kF32:
      return "f32";
    case ElementType::kF64:
      return "f64";
    case ElementType::kC64:
      return "complex<f32>";
    case ElementType::kC128:
      return "complex<f64>";
    case ElementType::kF8E4M3FN:
      return "f8E4M3FN";
    case ElementType::kF8E5M2:
      return "f8E5M2";
    case ElementType::kF8E4M3FNUZ:
      return "f8E4M3FNUZ";
    case ElementType::kF8E5M2FNUZ:
      return "f8E5M2FNUZ";
  }
  return "?";
}

bool is_float(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 || t == ElementType::kF32 ||
         t == ElementType::kF64 || is_float8(t);
}

bool is_float8(ElementType t) {
  return t == ElementType::kF8E4M3FN || t == ElementType::kF8E5M2 ||
         t == ElementType::kF8E4M3FNUZ || t == ElementType::kF8E5M2FNUZ;
}

bool is_signed_int(ElementType t) {
  return t == ElementType::kS8 || t == ElementType::kS16 || t == ElementType::kS32 ||
         t == ElementType::kS64;
}

bool is_unsigned_int(ElementType t) {
  return t == ElementType::kU8 || t == ElementType::kU16 || t == ElementType::kU32 ||
         t == ElementType::kU64;
}

int bit_width(ElementType t) {
  switch (t) {
    case ElementType::kPred:
      return 1;
    case ElementType::kS8:
    case ElementType::kU8:
    case ElementType::kF8E4M3FN:
    case ElementType::kF8E5M2:
    case ElementType::kF8E4M3FNUZ:
    case ElementType::kF8E5M2FNUZ:
      return 8;
    case ElementType::kS16:
    case ElementType::kU16:
    case ElementType::kF16:
    case ElementType::kBF16:
      return 16;
    case ElementType::kS32:
    case ElementType::kU32:
    case ElementType::kF32:
      return 32;
    case ElementType::kS64:
    case ElementType::kU64:
    case ElementType::kF64:
    case ElementType::kC64:
      return 64;
    case ElementType::kC128:
      return 128;
  }
  return 0;
}

bool is_complex(ElementType t) { return t == ElementType::kC64 || t == ElementType::kC128; }

ElementType complex_component(ElementType t) {
  if (t == ElementType::kC64) return ElementType::kF32;
  if (t == ElementType::kC128) return ElementType::kF64;
  return t;
}

ElementType complex_of(ElementType t) {
  if (is_complex(t)) return t;
  return t == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64;
}

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : shape) {
    s += std::to_string(d);
    s += 'x';
  }
  s += mlir_name(dtype);
  s += '>';
  return s;
}

}  // namespace torchtpu::shlo
