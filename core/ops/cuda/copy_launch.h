// core/ops/cuda/copy_launch.h — plain C++ entry point of core/ops/view.cu: the strided (and broadcast)
// device copy behind CopyInto for CUDA tensors, any element size of 1, 2, 4 or 8 bytes.
//
// Invariant: for linear index i < n of dst's shape, dst[off0] = src[off1] with the offsets of `calc`
// ({dst strides, src strides broadcast to dst's shape}, cuda/offset_calculator.h, host-tested); bytes are
// copied as they are, or converted between float32, bfloat16 and bool (LaunchConvertCopy); enqueued on
// `stream`. Returns the launch error, "" on
// success. Compiled for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchStridedCopy(4, dst_ptr, src_ptr, calc, n, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/convert_math.h"
#include "core/ops/cuda/offset_calculator.h"

namespace tessel::cuda {

// element_bytes: 1, 2, 4, 8, or 16 (widened elements, below).
const char* LaunchStridedCopy(int64_t element_bytes, void* dst, const void* src, const OffsetCalculator<2>& calc,
                              int64_t n, void* stream);

// A same-dtype copy whose innermost merged dim is unit-stride on both sides moves up to 16 bytes per
// thread: the dim shrinks by the widening factor w and every other stride is divided by w, when the
// dim's size and those strides are multiples of w and both pointers are aligned to w elements. The walk's
// index math then runs once per 16 bytes instead of once per element (a GPT-2 head transpose of bf16
// [8, 1024, 12, 64]: one offset per 8 elements, 16-byte loads and stores). Returns the widened element
// size and calc (w = 1: unchanged).
struct WideCopy {
  int64_t element_bytes;
  OffsetCalculator<2> calc;
  int64_t n;
};
inline WideCopy WidenCopy(int64_t element_bytes, const void* dst, const void* src, const OffsetCalculator<2>& calc,
                          int64_t n) {
  WideCopy same{element_bytes, calc, n};
  const int last = calc.ndim - 1;
  if (last < 0 || calc.strides[0][last] != 1 || calc.strides[1][last] != 1) return same;
  for (int64_t w = 16 / element_bytes; w > 1; w /= 2) {
    const int64_t bytes = w * element_bytes;
    bool ok = calc.sizes[last] % w == 0 && reinterpret_cast<uintptr_t>(dst) % bytes == 0 &&
              reinterpret_cast<uintptr_t>(src) % bytes == 0;
    for (int d = 0; d < last && ok; ++d) ok = calc.strides[0][d] % w == 0 && calc.strides[1][d] % w == 0;
    if (!ok) continue;
    WideCopy wide{bytes, calc, n / w};
    wide.calc.sizes[last] /= w;
    for (int d = 0; d < last; ++d) {
      wide.calc.strides[0][d] /= w;
      wide.calc.strides[1][d] /= w;
    }
    return wide;
  }
  return same;
}
// The same walk converting between float32, bfloat16 and bool (cuda/convert_math.h: ConvertAt).
// REQUIRES: dst_type != src_type.
const char* LaunchConvertCopy(ConvertType dst_type, ConvertType src_type, void* dst, const void* src,
                              const OffsetCalculator<2>& calc, int64_t n, void* stream);

}  // namespace tessel::cuda
