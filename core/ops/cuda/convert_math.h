// core/ops/cuda/convert_math.h — one element of the CUDA dtype-converting strided copy (core/ops/view.cu,
// LaunchConvertCopy): float32 <-> bfloat16 through the row kernels' LoadF / StoreF, shared with a host test
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

template <typename TOut, typename TIn>
TESSEL_HOST_DEVICE inline void ConvertAt(TOut* dst, const TIn* src, const OffsetCalculator<2>& calc, int64_t i) {
  int64_t off[2];
  calc.Get(i, off);
  StoreF(dst, off[0], LoadF(src, off[1]));
}

}  // namespace tessel::cuda
