// core/ops/unary_pointwise.cu — CUDA kernels of the unary pointwise ops beyond gelu and their fused
// backward ops (core/ops/unary_pointwise_cuda.cc): grid-stride over contiguous elements, the formula of
// cuda/pointwise_math.h in float32, one rounding on a bfloat16 store. Compiled with nvcc 13 for sm_90a +
// compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/pointwise_launch.h"

namespace tessel::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void PointwiseKernel(PointwiseOp op, const T* x, T* y, int64_t n, PointwiseParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(y, i, ApplyPointwise(op, LoadF(x, i), p));
  }
}

template <typename T>
__global__ void PointwiseGradKernel(PointwiseGradOp op, const T* g, const T* t, T* d, int64_t n, PointwiseParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(d, i, ApplyPointwiseGrad(op, LoadF(g, i), LoadF(t, i), p));
  }
}

}  // namespace

const char* LaunchPointwise(PointwiseOp op, ElemType type, const void* x, void* y, int64_t n, const PointwiseParams& p,
                            void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = LaneBlocks((n + kThreads - 1) / kThreads);
  if (type == ElemType::kFloat32) {
    PointwiseKernel<float><<<blocks, kThreads, 0, s>>>(op, static_cast<const float*>(x), static_cast<float*>(y), n, p);
  } else {
    PointwiseKernel<uint16_t>
        <<<blocks, kThreads, 0, s>>>(op, static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n, p);
  }
  return LastLaunchError();
}

const char* LaunchPointwiseGrad(PointwiseGradOp op, ElemType type, const void* g, const void* t, void* d, int64_t n,
                                const PointwiseParams& p, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = LaneBlocks((n + kThreads - 1) / kThreads);
  if (type == ElemType::kFloat32) {
    PointwiseGradKernel<float><<<blocks, kThreads, 0, s>>>(op, static_cast<const float*>(g),
                                                           static_cast<const float*>(t), static_cast<float*>(d), n, p);
  } else {
    PointwiseGradKernel<uint16_t><<<blocks, kThreads, 0, s>>>(
        op, static_cast<const uint16_t*>(g), static_cast<const uint16_t*>(t), static_cast<uint16_t*>(d), n, p);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
