// core/ops/elementwise.cu — CUDA kernels of the elementwise family (add/sub/mul/div with broadcasting
// and strides, float32 and bfloat16 with fp32 math). The schema, dtype checks, output allocation and
// backward formulas stay in elementwise.cc / elementwise_cuda.cc; this file only computes.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/elementwise_launch.h"

namespace tessel::cuda {
namespace {

template <BinaryOp kOp>
__device__ __forceinline__ float Apply(float a, float b) {
  if constexpr (kOp == BinaryOp::kAdd) return a + b;
  if constexpr (kOp == BinaryOp::kSub) return a - b;
  if constexpr (kOp == BinaryOp::kMul) return a * b;
  return a / b;
}

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }
__device__ __forceinline__ void Store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(uint16_t* p, int64_t i, float v) { p[i] = FloatToBf16(v); }

// Contiguous same-shape operands: no index math.
template <BinaryOp kOp, typename T>
__global__ void BinaryContiguous(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    Store(out, i, Apply<kOp>(Load(a, i), Load(b, i)));
  }
}

template <BinaryOp kOp, typename T>
__global__ void BinaryStrided(T* out, const T* a, const T* b, OffsetCalculator<3> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[3];
    calc.Get(i, off);
    Store(out, off[0], Apply<kOp>(Load(a, off[1]), Load(b, off[2])));
  }
}

// Contiguous same-shape operands, 16-byte aligned, n a multiple of 16 / sizeof(T) (a residual add of
// bf16 [8, 1024, 768]): one 16-byte load per operand per step, the same per-element math as above.
template <BinaryOp kOp, typename T>
__global__ void BinaryContiguousVec(T* out, const T* a, const T* b, int64_t nvec) {
  constexpr int kV = 16 / sizeof(T);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nvec; i += int64_t{gridDim.x} * blockDim.x) {
    alignas(16) T va[kV], vb[kV], vo[kV];
    *reinterpret_cast<uint4*>(va) = reinterpret_cast<const uint4*>(a)[i];
    *reinterpret_cast<uint4*>(vb) = reinterpret_cast<const uint4*>(b)[i];
#pragma unroll
    for (int k = 0; k < kV; ++k) Store(vo, k, Apply<kOp>(Load(va, k), Load(vb, k)));
    reinterpret_cast<uint4*>(out)[i] = *reinterpret_cast<const uint4*>(vo);
  }
}

bool IsContiguous(const OffsetCalculator<3>& c) {
  if (c.ndim > 1) return false;
  return c.ndim == 0 || (c.strides[0][0] == 1 && c.strides[1][0] == 1 && c.strides[2][0] == 1);
}

template <BinaryOp kOp, typename T>
void Launch(void* out, const void* a, const void* b, const OffsetCalculator<3>& calc, int64_t n, cudaStream_t s) {
  constexpr int kThreads = 256;
  auto grid = [](int64_t items) {  // grid-stride beyond 65535 * 8 blocks
    const int64_t blocks = (items + kThreads - 1) / kThreads;
    return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  };
  const int blocks = grid(n);
  constexpr int64_t kV = 16 / sizeof(T);
  if (IsContiguous(calc) && n % kV == 0 && Aligned16(out) && Aligned16(a) && Aligned16(b)) {
    BinaryContiguousVec<kOp, T><<<grid(n / kV), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                                  static_cast<const T*>(b), n / kV);
  } else if (IsContiguous(calc)) {
    BinaryContiguous<kOp, T><<<blocks, kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                         static_cast<const T*>(b), n);
  } else {
    BinaryStrided<kOp, T><<<blocks, kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                      static_cast<const T*>(b), calc, n);
  }
}

template <BinaryOp kOp>
void LaunchType(ElemType type, void* out, const void* a, const void* b, const OffsetCalculator<3>& calc, int64_t n,
                cudaStream_t s) {
  if (type == ElemType::kFloat32) {
    Launch<kOp, float>(out, a, b, calc, n, s);
  } else {
    Launch<kOp, uint16_t>(out, a, b, calc, n, s);
  }
}

}  // namespace

const char* LaunchBinary(BinaryOp op, ElemType type, void* out, const void* a, const void* b,
                         const OffsetCalculator<3>& calc, int64_t n, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (op) {
    case BinaryOp::kAdd: LaunchType<BinaryOp::kAdd>(type, out, a, b, calc, n, s); break;
    case BinaryOp::kSub: LaunchType<BinaryOp::kSub>(type, out, a, b, calc, n, s); break;
    case BinaryOp::kMul: LaunchType<BinaryOp::kMul>(type, out, a, b, calc, n, s); break;
    case BinaryOp::kDiv: LaunchType<BinaryOp::kDiv>(type, out, a, b, calc, n, s); break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace tessel::cuda
