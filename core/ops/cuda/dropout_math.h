// core/ops/cuda/dropout_math.h — which elements dropout keeps: one formula for the CPU kernel
// (core/ops/dropout.cc) and the CUDA kernel (core/ops/dropout.cu), so both draw the same mask.
//
// Invariant: the element whose counter is c (the generator offset the call reserved plus the element's
// row-major index in the FULL tensor, so a shard computes exactly its block of the full tensor's mask)
// is kept iff (word >> 8) < threshold, where word = Philox4x32-10(counter (c / 4, c / 2^34, stream
// "drop", 0), key = seed).w[c % 4] and threshold = ceil((1 - p) · 2^24): P(keep) = 1 - p to 2^-24.
// The stream word keeps dropout's counters apart from the initializers' (core/tensor/random.cc draws
// with stream 0), so a mask never reuses the words that drew a weight.
//
// Example:
//   const uint32_t t = DropoutThreshold(0.1);
//   const PhiloxBlock b = DropoutBlock(seed, c >> 2);
//   const bool keep = DropoutKeeps(b.w[c & 3], t);
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/philox.h"
#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

inline constexpr uint32_t kDropoutStream = 0x64726f70u;  // "drop"

// ceil((1 - p) · 2^24) for p in [0, 1]: 2^24 keeps everything, 0 nothing.
inline uint32_t DropoutThreshold(double p) { return static_cast<uint32_t>(std::ceil((1.0 - p) * 16777216.0)); }

// The four words of counters [4·block, 4·block + 4).
TESSEL_HOST_DEVICE inline PhiloxBlock DropoutBlock(uint64_t seed, uint64_t block) {
  return PhiloxRounds(PhiloxBlock{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), kDropoutStream, 0u}},
                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

TESSEL_HOST_DEVICE inline bool DropoutKeeps(uint32_t word, uint32_t threshold) { return (word >> 8) < threshold; }

}  // namespace tessel::cuda
