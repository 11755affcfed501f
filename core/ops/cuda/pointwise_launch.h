// core/ops/cuda/pointwise_launch.h — plain C++ entry points of core/ops/unary_pointwise.cu: the unary
// pointwise ops and their fused backward ops (cuda/pointwise_math.h) over n contiguous float32 / bfloat16
// elements, enqueued on `stream`. Each returns the launch error, "" on success. Compiled for sm_90a +
// compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchPointwise(cuda::PointwiseOp::kExp, cuda::ElemType::kFloat32, x, y, n, {}, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/elementwise_launch.h"
#include "core/ops/cuda/pointwise_math.h"

namespace tessel::cuda {

const char* LaunchPointwise(PointwiseOp op, ElemType type, const void* x, void* y, int64_t n, const PointwiseParams& p,
                            void* stream);
const char* LaunchPointwiseGrad(PointwiseGradOp op, ElemType type, const void* g, const void* t, void* d, int64_t n,
                                const PointwiseParams& p, void* stream);

}  // namespace tessel::cuda
