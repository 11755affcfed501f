// core/ops/cuda/bf16.h — bfloat16 <-> float conversions used inside CUDA kernels (bit-level, so the
// same code runs on the host and is tested against tessel's CPU conversion in core/tensor/dtype.h).
//
// Invariant: FloatToBf16 rounds to nearest, ties to even, and keeps NaN a (quiet) NaN, matching the
// CPU kernels bit for bit; Bf16ToFloat is exact.
//
// Example:
//   uint16_t h = FloatToBf16(1.0f);   // 0x3f80
//   float f = Bf16ToFloat(h);          // 1.0f
#pragma once

#include <cstdint>
#include <cstring>

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

TESSEL_HOST_DEVICE inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

TESSEL_HOST_DEVICE inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN stays NaN (quiet bit set)
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace tessel::cuda
