// Random bits from a runtime (seed, offset) state on stablehlo.rng_bit_generator (ThreeFry),
// shared by the sampling ops (random.cpp) and the ops that draw a mask (dropout.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {

// `shape` random bits of `bits` type (ui32 or ui64) from `state`, a tensor<2xui64>.
inline Value random_bits_from_state(FunctionBuilder& b, Value state,
                                    const std::vector<int64_t>& shape, ElementType bits) {
  // ThreeFry uses the state as (key, counter) and counts up from the counter, so states whose
  // offsets differ by less than the draw size would yield overlapping, shifted streams. One
  // extra block hashes (seed, offset) into a fresh (key, counter) pair, which decorrelates
  // consecutive offsets whatever step the runtime advances them by.
  Value hashed = shlo::rng_bit_generator(b, state, state.type).second;
  return shlo::rng_bit_generator(b, hashed, TensorType(bits, shape)).second;
}

// Uniform [0, 1) in `ct` from the low `digits` bits of a draw, as
// at::uniform_real_distribution does, so the value is exact in a dtype with `digits` mantissa
// digits and never rounds up to 1.
inline Value uniform01_from_state(FunctionBuilder& b, Value state,
                                  const std::vector<int64_t>& shape, ElementType ct, int digits) {
  ElementType bt = digits > 32 ? ElementType::kU64 : ElementType::kU32;
  Value bits = random_bits_from_state(b, state, shape, bt);
  TensorType bits_t(bt, shape);
  uint64_t mask = (uint64_t{1} << digits) - 1;
  Value masked =
      b.binary("stablehlo.and", bits, b.constant_int(static_cast<int64_t>(mask), bits_t));
  Value x = b.convert(masked, ct);
  return b.mul(x, b.constant(std::ldexp(1.0, -digits), TensorType(ct, shape)));
}

}  // namespace torchtpu::lowering
