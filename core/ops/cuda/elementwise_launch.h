// core/ops/cuda/elementwise_launch.h — plain C++ entry points of core/ops/elementwise.cu (no CUDA
// types, so g++ code calls them): binary add/sub/mul/div with broadcasting and arbitrary strides.
//
// Invariant: out[i] = op(a[i], b[i]) for every linear index i < n, offsets from `calc`; float32 math for
// both dtypes (bf16 loads widen to fp32, the result rounds once to bf16, as the CPU kernels do);
// enqueued on `stream` (a cudaStream_t, null = default stream), asynchronous. Compiled for sm_90a +
// compute_90 PTX. run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   cuda::LaunchBinary(cuda::BinaryOp::kAdd, cuda::ElemType::kFloat32, po, pa, pb, calc, n, stream);
#pragma once

#include <cstdint>

#include "core/ops/cuda/offset_calculator.h"

namespace tessel::cuda {

enum class BinaryOp : int { kAdd, kSub, kMul, kDiv };
enum class ElemType : int { kFloat32, kBFloat16 };

// Returns the launch error as a string, empty on success.
const char* LaunchBinary(BinaryOp op, ElemType type, void* out, const void* a, const void* b,
                         const OffsetCalculator<3>& calc, int64_t n, void* stream);

}  // namespace tessel::cuda
