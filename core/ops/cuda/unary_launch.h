// core/ops/cuda/unary_launch.h — plain C++ entry points of core/ops/unary.cu: gelu and gelu_backward over
// n contiguous float32 / bfloat16 elements (cuda/gelu_math.h formulas, fp32 math, one rounding on store),
// enqueued on `stream`. Each returns the launch error, "" on success. Compiled for sm_90a + compute_90
// PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchGelu(cuda::ElemType::kBFloat16, x, y, n, /*tanh=*/true, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/elementwise_launch.h"

namespace tessel::cuda {

const char* LaunchGelu(ElemType type, const void* x, void* y, int64_t n, bool tanh_approx, void* stream);
const char* LaunchGeluBackward(ElemType type, const void* g, const void* x, void* dx, int64_t n, bool tanh_approx,
                               void* stream);

}  // namespace tessel::cuda
