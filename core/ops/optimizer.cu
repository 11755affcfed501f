// core/ops/optimizer.cu — the fused AdamW and SGD CUDA kernels (one pass over p, g and the state; the
// element math is core/ops/cuda/adamw_math.h / sgd_math.h, shared with host tests against the CPU kernels). Compiled with nvcc 13 for
// sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/optimizer_launch.h"

namespace tessel::cuda {
namespace {

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }
__device__ __forceinline__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(uint16_t* p, int64_t i, float v) { p[i] = FloatToBf16(v); }

template <typename T>
__global__ void AdamWKernel(T* p, const T* g, T* m, T* v, int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float pi = Load(p, i), mi = Load(m, i), vi = Load(v, i);
    AdamWUpdate(s, Load(g, i), pi, mi, vi);
    Store(m, i, mi);
    Store(v, i, vi);
    Store(p, i, pi);
  }
}

template <typename T>
__global__ void SgdKernel(T* p, const T* g, T* buf, int64_t n, SgdScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float pi = Load(p, i), bi = buf != nullptr ? Load(buf, i) : 0.0f;
    SgdUpdate<T>(s, Load(g, i), pi, buf != nullptr ? &bi : nullptr);
    if (buf != nullptr && s.momentum != 0) Store(buf, i, bi);
    Store(p, i, pi);
  }
}

int Blocks(int64_t n, int threads) {
  const int64_t blocks64 = (n + threads - 1) / threads;
  return static_cast<int>(blocks64 < 65535 * 8 ? blocks64 : 65535 * 8);
}

}  // namespace

const char* LaunchSgd(AdamWType type, void* p, const void* g, void* buf, int64_t n, const SgdScalars& s, void* stream) {
  if (n == 0) return "";
  constexpr int kThreads = 256;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (type == AdamWType::kFloat32) {
    SgdKernel<float><<<Blocks(n, kThreads), kThreads, 0, st>>>(static_cast<float*>(p), static_cast<const float*>(g),
                                                               static_cast<float*>(buf), n, s);
  } else {
    SgdKernel<uint16_t><<<Blocks(n, kThreads), kThreads, 0, st>>>(
        static_cast<uint16_t*>(p), static_cast<const uint16_t*>(g), static_cast<uint16_t*>(buf), n, s);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

const char* LaunchAdamW(AdamWType type, void* p, const void* g, void* m, void* v, int64_t n, const AdamWScalars& s,
                        void* stream) {
  if (n == 0) return "";
  constexpr int kThreads = 256;
  const int blocks = Blocks(n, kThreads);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (type == AdamWType::kFloat32) {
    AdamWKernel<float><<<blocks, kThreads, 0, st>>>(static_cast<float*>(p), static_cast<const float*>(g),
                                                    static_cast<float*>(m), static_cast<float*>(v), n, s);
  } else {
    AdamWKernel<uint16_t><<<blocks, kThreads, 0, st>>>(static_cast<uint16_t*>(p), static_cast<const uint16_t*>(g),
                                                       static_cast<uint16_t*>(m), static_cast<uint16_t*>(v), n, s);
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace tessel::cuda
