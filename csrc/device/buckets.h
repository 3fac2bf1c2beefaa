// Size buckets (TORCHTPU_SIZE_BUCKETS, on by default where storages keep 1-D buffers): a storage
// of n elements keeps a device buffer of bucket(n) >= n elements. A program's argument type is
// its buffer's, so without buckets every element count is a program of its own; with them the
// exact count travels at run time (or does not matter, elementwise), and one program serves
// every size of its bucket. The elements past n are padding: their values are unspecified and
// nothing reads them as data (views, numel, host copies, serialization see n elements).
//
// The ladder: TORCHTPU_SIZE_BUCKET_MIN elements (a power of two, default 4096) for anything
// smaller, then powers of two up to 2^18 elements, then eight steps per power of two, so the
// padding of a storage stays under 2x (and 1 MiB of float32) for small ones and under 1/8 for
// large ones.
#pragma once

#include <cstdint>

namespace torchtpu::device {

// Whether storages round up to buckets (read once per process).
bool size_buckets();
// Storages and results under this many elements keep their exact size and run exact programs
// (TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS).
int64_t exact_below();
// The smallest bucket, in elements.
int64_t bucket_min();
// The elements a storage of `n` elements keeps on the device: bucket(n), or n when buckets are
// off or n is 0.
int64_t bucket_elements(int64_t n);

}  // namespace torchtpu::device
