// core/ops/cuda/optimizer_launch.h — plain C++ entry point of core/ops/optimizer.cu: the fused AdamW
// step over contiguous parameter, gradient and state (float32, or bfloat16 with fp32 math and one
// rounding per stored value), enqueued on `stream`. Compiled for sm_90a + compute_90;
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchAdamW(cuda::AdamWType::kFloat32, p, g, m, v, n, scalars, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/adamw_math.h"
#include "core/ops/cuda/sgd_math.h"

namespace tessel::cuda {

enum class AdamWType : int { kFloat32, kBFloat16 };

// Returns the launch error, empty on success.
const char* LaunchAdamW(AdamWType type, void* p, const void* g, void* m, void* v, int64_t n, const AdamWScalars& s,
                        void* stream);
// buf: the momentum buffer, or null (no momentum buffer).
const char* LaunchSgd(AdamWType type, void* p, const void* g, void* buf, int64_t n, const SgdScalars& s, void* stream);

}  // namespace tessel::cuda
