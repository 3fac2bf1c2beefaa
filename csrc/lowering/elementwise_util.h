// Small helpers the elementwise op families share.
#pragma once

#include <functional>
#include <limits>
#include <string>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering::ew {

using shlo::CompareDirection;

inline bool is_fp(ElementType t) { return shlo::is_float(t); }
inline Value cmp(FunctionBuilder& b, Value x, Value y, CompareDirection d) {
  return b.compare(x, y, d);
}
inline Value lt0(FunctionBuilder& b, Value x) {
  return cmp(b, x, cst(b, 0, x), CompareDirection::kLT);
}
inline Value is_nan(FunctionBuilder& b, Value x) { return cmp(b, x, x, CompareDirection::kNE); }
// Rounds toward zero (stablehlo has floor and ceil, no trunc).
inline Value trunc_float(FunctionBuilder& b, Value x) {
  return b.select(lt0(b, x), b.unary("stablehlo.ceil", x), b.unary("stablehlo.floor", x));
}

// XLA's maximum/minimum return the non-NaN operand on CPU; PyTorch propagates NaN.
inline Value max_nan(FunctionBuilder& b, Value x, Value y) {
  Value r = b.max(x, y);
  if (!is_fp(x.dtype())) return r;
  r = b.select(is_nan(b, x), x, r);
  return b.select(is_nan(b, y), y, r);
}

inline Value min_nan(FunctionBuilder& b, Value x, Value y) {
  Value r = b.min(x, y);
  if (!is_fp(x.dtype())) return r;
  r = b.select(is_nan(b, x), x, r);
  return b.select(is_nan(b, y), y, r);
}

// Sign bit of a float, so -0.0 and -NaN count as negative like std::signbit.
inline Value signbit(FunctionBuilder& b, Value x) {
  if (!is_fp(x.dtype())) return lt0(b, x);
  ElementType bits = shlo::bit_width(x.dtype()) == 8    ? ElementType::kS8
                     : shlo::bit_width(x.dtype()) == 16 ? ElementType::kS16
                     : shlo::bit_width(x.dtype()) == 32 ? ElementType::kS32
                                                        : ElementType::kS64;
  return lt0(b, b.bitcast_convert(x, bits));
}

inline Value is_inf(FunctionBuilder& b, Value x) {
  Value inf = cst(b, std::numeric_limits<double>::infinity(), x);
  return cmp(b, b.unary("stablehlo.abs", x), inf, CompareDirection::kEQ);
}

// std::copysign: |x| with the sign bit of y (NaN's and zero's sign included).
inline Value copy_sign(FunctionBuilder& b, Value x, Value y) {
  Value mag = b.unary("stablehlo.abs", x);
  return b.select(signbit(b, y), b.neg(mag), mag);
}

// ---- complex values: StableHLO has complex arithmetic, but predicates and conjugation work
// on the two float parts.
inline Value real_part(FunctionBuilder& b, Value z) { return shlo::real(b, z); }
inline Value imag_part(FunctionBuilder& b, Value z) { return shlo::imag(b, z); }
inline Value make_complex(FunctionBuilder& b, Value re, Value im, ElementType complex_dtype) {
  Value z = shlo::complex(b, re, im);
  TORCH_INTERNAL_ASSERT(z.dtype() == complex_dtype, "make_complex: parts of the wrong width");
  return z;
}
inline Value conj(FunctionBuilder& b, Value z) {
  return make_complex(b, real_part(b, z), b.neg(imag_part(b, z)), z.dtype());
}
// |z| as a real value, with std::abs's rules for non-finite parts: inf if either part is inf,
// else NaN if either is NaN. XLA's own hypot loses a NaN part (|0 + NaN j| came out 0).
inline Value complex_abs(FunctionBuilder& b, Value z) {
  Value re = real_part(b, z), im = imag_part(b, z);
  Value r = shlo::abs(b, z);
  const double inf = std::numeric_limits<double>::infinity();
  r = b.select(lor(b, is_nan(b, re), is_nan(b, im)),
               cst(b, std::numeric_limits<double>::quiet_NaN(), r), r);
  Value re_inf = cmp(b, b.unary("stablehlo.abs", re), cst(b, inf, re), CompareDirection::kEQ);
  Value im_inf = cmp(b, b.unary("stablehlo.abs", im), cst(b, inf, im), CompareDirection::kEQ);
  return b.select(lor(b, re_inf, im_inf), cst(b, inf, r), r);
}

// x != 0 as bool: a complex value is true when either part is nonzero (a conversion would
// look at the real part only).
inline Value truth(FunctionBuilder& b, Value x) {
  if (!shlo::is_complex(x.dtype())) return b.convert(x, ElementType::kPred);
  return cmp(b, x, cst(b, 0, x), CompareDirection::kNE);
}

using UnaryFn = std::function<Value(FunctionBuilder&, Value)>;

inline UnaryFn unary_fn(const char* name) {
  std::string op = name;
  return [op](FunctionBuilder& b, Value x) { return b.unary(op, x); };
}

enum class Cut { kRealAxis, kImagAxis };

// XLA's complex functions ignore the sign of a zero part, and on a branch cut that sign picks
// the side: CPU's sqrt(-4 - 0j) is -2j, XLA's 2j. Such inputs are evaluated at +0 and mapped
// back by the function's symmetry: f(conj z) = conj f(z) for a cut along the real axis
// (sqrt, asin, acos, acosh, atanh), f(-conj z) = -conj f(z) for the odd asinh and atan, cut
// along the imaginary axis.
inline UnaryFn signed_zero_cut(UnaryFn f, Cut cut) {
  return [f, cut](FunctionBuilder& b, Value z) -> Value {
    if (!shlo::is_complex(z.dtype())) return f(b, z);
    Value re = real_part(b, z), im = imag_part(b, z);
    Value part = cut == Cut::kRealAxis ? im : re;
    Value zero = cst(b, 0, part);
    Value neg0 =
        b.binary("stablehlo.and", cmp(b, part, zero, CompareDirection::kEQ), signbit(b, part));
    Value fixed = cut == Cut::kRealAxis ? make_complex(b, re, b.select(neg0, zero, im), z.dtype())
                                        : make_complex(b, b.select(neg0, zero, re), im, z.dtype());
    Value r = f(b, fixed);
    Value mapped = cut == Cut::kRealAxis
                       ? conj(b, r)
                       : make_complex(b, b.neg(real_part(b, r)), imag_part(b, r), r.dtype());
    return b.select(neg0, mapped, r);
  };
}

// Argument i broadcast to the result shape, in dtype `dt`.
inline Value operand(LoweringContext& ctx, size_t i, ElementType dt) {
  return coerce(ctx.b, ctx.tensor(i), ctx.out_type().with_dtype(dt));
}

}  // namespace torchtpu::lowering::ew
