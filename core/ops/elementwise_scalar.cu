// core/ops/elementwise_scalar.cu — the CUDA kernel behind the elementwise family's scalar and in-place
// ops (add_scalar, mul_scalar, mul_, add_; core/ops/elementwise_scalar_cuda.cc): one grid-stride affine
// step per element (cuda/affine_math.h) over the shared OffsetCalculator, float32 and bfloat16.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/cuda/affine_launch.h"
#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/block_merge.cuh"

namespace tessel::cuda {
namespace {

template <typename T>
__global__ void AffineKernel(T* out, const T* a, const T* b, OffsetCalculator<3> calc, int64_t n, AffineParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[3];
    calc.Get(i, off);
    StoreF(out, off[0], Affine(LoadF(a, off[1]), p.has_b ? LoadF(b, off[2]) : 0.0f, p));
  }
}

}  // namespace

const char* LaunchAffine(ElemType type, void* out, const void* a, const void* b, const OffsetCalculator<3>& calc,
                         int64_t n, const AffineParams& p, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int kThreads = 256;
  const int blocks = LaneBlocks((n + kThreads - 1) / kThreads);
  if (type == ElemType::kFloat32) {
    AffineKernel<float><<<blocks, kThreads, 0, s>>>(static_cast<float*>(out), static_cast<const float*>(a),
                                                    static_cast<const float*>(b), calc, n, p);
  } else {
    AffineKernel<uint16_t><<<blocks, kThreads, 0, s>>>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                                                       static_cast<const uint16_t*>(b), calc, n, p);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
