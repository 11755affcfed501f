// core/ops/unary.cu — CUDA kernels of gelu and gelu_backward (exact and tanh), grid-stride over
// contiguous elements, float32 and bfloat16 with fp32 math. The formulas are cuda/gelu_math.h,
// host-tested against the CPU ops; checks stay in unary_cuda.cc. Compiled with nvcc 13 for sm_90a +
// compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/gelu_math.h"
#include "core/ops/cuda/unary_launch.h"

namespace tessel::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void GeluKernel(const T* x, T* y, int64_t n, bool tanh_approx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(y, i, GeluOut(LoadF(x, i), tanh_approx));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(const T* g, const T* x, T* dx, int64_t n, bool tanh_approx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    StoreF(dx, i, GeluGrad(LoadF(g, i), LoadF(x, i), tanh_approx));
  }
}

int Blocks(int64_t n) { return LaneBlocks((n + kThreads - 1) / kThreads); }

}  // namespace

const char* LaunchGelu(ElemType type, const void* x, void* y, int64_t n, bool tanh_approx, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    GeluKernel<float>
        <<<Blocks(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(y), n, tanh_approx);
  } else {
    GeluKernel<uint16_t>
        <<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n, tanh_approx);
  }
  return LastLaunchError();
}

const char* LaunchGeluBackward(ElemType type, const void* g, const void* x, void* dx, int64_t n, bool tanh_approx,
                               void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    GeluBackwardKernel<float><<<Blocks(n), kThreads, 0, s>>>(static_cast<const float*>(g), static_cast<const float*>(x),
                                                             static_cast<float*>(dx), n, tanh_approx);
  } else {
    GeluBackwardKernel<uint16_t><<<Blocks(n), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(g), static_cast<const uint16_t*>(x), static_cast<uint16_t*>(dx), n, tanh_approx);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
