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

const char* LaunchStridedCopy(int64_t element_bytes, void* dst, const void* src, const OffsetCalculator<2>& calc,
                              int64_t n, void* stream);
// The same walk converting between float32, bfloat16 and bool (cuda/convert_math.h: ConvertAt).
// REQUIRES: dst_type != src_type.
const char* LaunchConvertCopy(ConvertType dst_type, ConvertType src_type, void* dst, const void* src,
                              const OffsetCalculator<2>& calc, int64_t n, void* stream);

}  // namespace tessel::cuda
