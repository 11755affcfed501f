// core/ops/cuda/convert_math.h — one element of the CUDA dtype-converting strided copy (core/ops/view.cu,
// LaunchConvertCopy): between float32, bfloat16 and bool through LoadF / StoreF, shared with a host test
// (convert_copy_test.cc) that runs it over strided layouts against the CPU CopyInto.
//
// Invariant: dst[off0] = src[off1] converted with tessel's CPU rounding (cuda/bf16.h: nearest, ties to
// even, NaN stays NaN; bf16 -> float exact), for the offsets of `calc` ({dst strides, src strides
// broadcast to dst's shape}) at linear index i of dst's shape.
//
// Example:
//   for (int64_t i = 0; i < n; ++i) ConvertAt(dst_bf16, src_f32, calc, i);
#pragma once

#include <cstdint>

#include "core/ops/cuda/offset_calculator.h"
#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

// bool as its byte (0 / 1), for casts to and from bool: true is 1, and a value converts to true when it
// is not zero (NaN included), as the CPU's conversion does.
TESSEL_HOST_DEVICE inline float LoadF(const uint8_t* p, int64_t i) { return p[i] != 0 ? 1.0f : 0.0f; }
TESSEL_HOST_DEVICE inline void StoreF(uint8_t* p, int64_t i, float v) { p[i] = v != 0.0f ? 1 : 0; }

enum class ConvertType : uint8_t { kFloat32, kBFloat16, kBool };

template <typename TOut, typename TIn>
TESSEL_HOST_DEVICE inline void ConvertAt(TOut* dst, const TIn* src, const OffsetCalculator<2>& calc, int64_t i) {
  int64_t off[2];
  calc.Get(i, off);
  StoreF(dst, off[0], LoadF(src, off[1]));
}

}  // namespace tessel::cuda
