// core/ops/ternary.cu — CUDA kernels of the selection and comparison ops (core/ops/ternary_cuda.cc):
// grid-stride over the output, offsets from the shared OffsetCalculator, one element step of
// cuda/ternary_math.h each. Compiled with nvcc 13 for sm_90a + compute_90 PTX;
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/ternary_launch.h"

namespace tessel::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return LaneBlocks((n + kThreads - 1) / kThreads); }

template <typename T>
__global__ void CompareKernel(CompareOp op, uint8_t* out, const T* a, const T* b, OffsetCalculator<3> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    CompareAt(op, out, a, b, calc, i);
  }
}

template <typename W>
__global__ void WhereKernel(W* out, const uint8_t* cond, const W* a, const W* b, OffsetCalculator<4> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    WhereAt(out, cond, a, b, calc, i);
  }
}

template <typename W>
__global__ void MaskedFillKernel(W* out, const W* x, const uint8_t* mask, W value, OffsetCalculator<3> calc,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    MaskedFillAt(out, x, mask, value, calc, i);
  }
}

template <typename T>
void Compare(CompareOp op, uint8_t* out, const void* a, const void* b, const OffsetCalculator<3>& calc, int64_t n,
             cudaStream_t s) {
  CompareKernel<T><<<Blocks(n), kThreads, 0, s>>>(op, out, static_cast<const T*>(a), static_cast<const T*>(b), calc, n);
}

template <typename W>
void Where(void* out, const uint8_t* cond, const void* a, const void* b, const OffsetCalculator<4>& calc, int64_t n,
           cudaStream_t s) {
  WhereKernel<W><<<Blocks(n), kThreads, 0, s>>>(static_cast<W*>(out), cond, static_cast<const W*>(a),
                                                static_cast<const W*>(b), calc, n);
}

template <typename W>
void Fill(void* out, const void* x, const uint8_t* mask, uint64_t bits, const OffsetCalculator<3>& calc, int64_t n,
          cudaStream_t s) {
  MaskedFillKernel<W><<<Blocks(n), kThreads, 0, s>>>(static_cast<W*>(out), static_cast<const W*>(x), mask,
                                                     static_cast<W>(bits), calc, n);
}

}  // namespace

const char* LaunchCompare(CompareOp op, CompareType type, uint8_t* out, const void* a, const void* b,
                          const OffsetCalculator<3>& calc, int64_t n, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == CompareType::kFloat32) {
    Compare<float>(op, out, a, b, calc, n, s);
  } else if (type == CompareType::kBFloat16) {
    Compare<uint16_t>(op, out, a, b, calc, n, s);
  } else {
    Compare<int64_t>(op, out, a, b, calc, n, s);
  }
  return LastLaunchError();
}

const char* LaunchWhere(int64_t element_bytes, void* out, const uint8_t* cond, const void* a, const void* b,
                        const OffsetCalculator<4>& calc, int64_t n, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (element_bytes) {
    case 1: Where<uint8_t>(out, cond, a, b, calc, n, s); break;
    case 2: Where<uint16_t>(out, cond, a, b, calc, n, s); break;
    case 4: Where<uint32_t>(out, cond, a, b, calc, n, s); break;
    case 8: Where<uint64_t>(out, cond, a, b, calc, n, s); break;
    default: return "unsupported element size";
  }
  return LastLaunchError();
}

const char* LaunchMaskedFill(int64_t element_bytes, void* out, const void* x, const uint8_t* mask, uint64_t value_bits,
                             const OffsetCalculator<3>& calc, int64_t n, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (element_bytes) {
    case 1: Fill<uint8_t>(out, x, mask, value_bits, calc, n, s); break;
    case 2: Fill<uint16_t>(out, x, mask, value_bits, calc, n, s); break;
    case 4: Fill<uint32_t>(out, x, mask, value_bits, calc, n, s); break;
    case 8: Fill<uint64_t>(out, x, mask, value_bits, calc, n, s); break;
    default: return "unsupported element size";
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
