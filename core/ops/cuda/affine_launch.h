// core/ops/cuda/affine_launch.h — plain C++ entry point of core/ops/elementwise_scalar.cu: out = affine(a,
// b) (cuda/affine_math.h) over a broadcast / strided layout, float32 or bfloat16; in place when out and a
// are one tensor (same offsets: each element is read before it is written, by the same thread).
//
// Invariant: for linear index i < n, out[off0] = Affine(a[off1], b[off2], p) with the offsets of `calc`
// ({out, a, b} strides); b is read only when p.has_b. Enqueued on `stream`; returns the launch error, ""
// on success. Compiled for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchAffine(cuda::ElemType::kFloat32, dst, dst, src, calc, n, {1, alpha, 0, true, false}, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/affine_math.h"
#include "core/ops/cuda/elementwise_launch.h"
#include "core/ops/cuda/offset_calculator.h"

namespace tessel::cuda {

const char* LaunchAffine(ElemType type, void* out, const void* a, const void* b, const OffsetCalculator<3>& calc,
                         int64_t n, const AffineParams& p, void* stream);

}  // namespace tessel::cuda
