// Whether a fill value the host knows fits the destination dtype, checked the CPU's way: its
// checked conversion raises "value cannot be converted to type uint8_t without overflow" where
// the device would wrap 300 around to 44. Eager kernels check every call's value
// (aten/argument_checks.cpp); a compiled graph's constants are checked when it is lowered.
#pragma once

#include <ATen/Dispatch_v2.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <iterator>

#include "lowering/lowering.h"

namespace torchtpu::lowering {

inline void check_scalar_fits(const c10::Scalar& value, c10::ScalarType dtype) {
  // The dtypes the CPU's fill_ checks through AT_DISPATCH; others (complex32) unchecked.
  static constexpr c10::ScalarType kChecked[] = {c10::kByte,           c10::kChar,
                                                 c10::kShort,          c10::kInt,
                                                 c10::kLong,           c10::kUInt16,
                                                 c10::kUInt32,         c10::kUInt64,
                                                 c10::kBool,           c10::kHalf,
                                                 c10::kBFloat16,       c10::kFloat,
                                                 c10::kDouble,         c10::kComplexFloat,
                                                 c10::kComplexDouble,  c10::kFloat8_e4m3fn,
                                                 c10::kFloat8_e5m2,    c10::kFloat8_e4m3fnuz,
                                                 c10::kFloat8_e5m2fnuz};
  if (std::find(std::begin(kChecked), std::end(kChecked), dtype) == std::end(kChecked)) return;
  AT_DISPATCH_V2(dtype, "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16,
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES), AT_EXPAND(AT_FLOAT8_TYPES));
}

// A Scalar argument whose value the lowering sees (a compiled graph's constant, or the first
// eager call's value, which the eager argument checks have already accepted) against `dtype`,
// filling `numel` elements: the CPU fills a one-element float8 tensor without the check.
inline void check_scalar_arg_fits(const LArg& arg, ElementType dtype, int64_t numel = -1) {
  if (shlo::is_float8(dtype) && numel == 1) return;
  if (arg.kind == LArg::Kind::kScalar && arg.ivalue.isScalar()) {
    check_scalar_fits(arg.ivalue.toScalar(), to_scalar_type(dtype));
  }
}

}  // namespace torchtpu::lowering
