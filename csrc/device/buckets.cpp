#include "device/buckets.h"

#include <stdexcept>
#include <string>

#include "config/config.h"
#include "device/storage.h"

namespace torchtpu::device {
namespace {

// Above this (1 MiB of float32) the ladder takes eight steps per power of two, so a large
// storage pads by under 1/8: below it a storage pads by under 2x, which is at most this much.
// A model's parameters pad alike whether this is 2^16 or 2^18 (its matrices are larger, its
// vectors smaller: BERT-base 1.9%, GPT-2 3.5%; 22.6% and 8.2% from 2^20).
constexpr int64_t kFineFrom = int64_t{1} << 18;

int64_t read_min() {
  int64_t min = config::positive_int("TORCHTPU_SIZE_BUCKET_MIN", 4096, int64_t{1} << 30);
  if ((min & (min - 1)) != 0) {
    throw std::invalid_argument("TORCHTPU_SIZE_BUCKET_MIN='" + std::to_string(min) +
                                "' is not valid: expected a power of two");
  }
  return min;
}

}  // namespace

bool size_buckets() {
  // On by default where storages are flat buffers (XLA:CPU/GPU): size-generic programs then
  // serve every size of a bucket. Buffers of tiled platforms (TPU) keep their shapes.
  static const bool on = config::flag("TORCHTPU_SIZE_BUCKETS", true) && flat_buffers();
  return on;
}

int64_t exact_below() {
  static const int64_t n =
      config::positive_int("TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS", 64, int64_t{1} << 40);
  return n;
}

int64_t bucket_min() {
  static const int64_t min = read_min();
  return min;
}

int64_t bucket_elements(int64_t n) {
  if (n <= 0 || !size_buckets() || n < exact_below()) return n;
  int64_t b = bucket_min();
  if (n <= b) return b;
  while (b < n && b < kFineFrom) b *= 2;
  if (b >= n) return b;
  // n > kFineFrom: the next multiple of an eighth of n's power of two.
  int64_t octave = kFineFrom;
  while (octave * 2 <= n) octave *= 2;
  const int64_t step = octave / 8;
  return (n + step - 1) / step * step;
}

}  // namespace torchtpu::device
