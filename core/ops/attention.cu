// core/ops/attention.cu — flash-style CUDA forward of scaled_dot_product_attention: one block per (head,
// tile of 64 query rows), one thread per query row; key / value tiles of 32 rows are staged in shared
// memory as fp32 and every row folds them into its online softmax (cuda/flash_math.h, host-tested in this
// order against the CPU op); no score matrix is stored; under is_causal a block stops at its last row's
// keys. float32 and bfloat16 with fp32 math; head dims up to 128.
// NOT TUNED: CUDA-core FMAs with a per-row accumulator in local memory, not tensor-core (wgmma) tiles as
// FlashAttention-2/3 use, so expect it far below torch SDPA. No backward kernel yet.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; NOT yet run on a GPU.
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/flash_math.h"
#include "core/ops/cuda/row_kernels_launch.h"

namespace tessel::cuda {
namespace {

constexpr int kTileQ = 64;  // query rows (threads) per block
constexpr int kTileK = 32;  // key rows per shared-memory tile

template <typename T>
__global__ void FlashForwardKernel(const T* q, const T* k, const T* v, T* out, float* lse, int64_t t, int64_t s,
                                   int64_t d, int64_t dv, float scale, bool causal) {
  __shared__ float ks[kTileK * kMaxHeadDim];
  __shared__ float vs[kTileK * kMaxHeadDim];
  const int64_t h = blockIdx.y;
  const int64_t first = blockIdx.x * int64_t{kTileQ};
  const int64_t i = first + threadIdx.x;
  const bool active = i < t;
  const int64_t last = (first + kTileQ < t ? first + kTileQ : t) - 1;
  const int64_t block_end = FlashKeyEnd(last, s, causal);
  const int64_t row_end = active ? FlashKeyEnd(i, s, causal) : 0;
  const T* q_row = q + (h * t + (active ? i : 0)) * d;
  FlashState st = FlashState::Start();
  float acc[kMaxHeadDim];
  for (int64_t c = 0; c < dv; ++c) acc[c] = 0.0f;
  for (int64_t j0 = 0; j0 < block_end; j0 += kTileK) {
    const int64_t n = block_end - j0 < kTileK ? block_end - j0 : kTileK;
    __syncthreads();  // the previous tile is consumed
    for (int64_t e = threadIdx.x; e < n * d; e += blockDim.x) {
      ks[(e / d) * kMaxHeadDim + e % d] = LoadF(k, (h * s + j0) * d + e);
    }
    for (int64_t e = threadIdx.x; e < n * dv; e += blockDim.x) {
      vs[(e / dv) * kMaxHeadDim + e % dv] = LoadF(v, (h * s + j0) * dv + e);
    }
    __syncthreads();
    for (int64_t jj = 0; jj < n && j0 + jj < row_end; ++jj) {
      FlashUpdate(st, acc, FlashScore(q_row, ks + jj * kMaxHeadDim, d, scale), vs + jj * kMaxHeadDim, dv);
    }
  }
  if (active) FlashFinish(st, acc, dv, out + (h * t + i) * dv, lse + h * t + i);
}

template <typename T>
void Forward(const void* q, const void* k, const void* v, void* out, float* lse, int64_t bh, int64_t t, int64_t s,
             int64_t d, int64_t dv, float scale, bool causal, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>((t + kTileQ - 1) / kTileQ), static_cast<unsigned>(bh));
  FlashForwardKernel<T><<<grid, kTileQ, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                                 static_cast<const T*>(v), static_cast<T*>(out), lse, t, s, d, dv,
                                                 scale, causal);
}

}  // namespace

const char* LaunchFlashForward(ElemType type, const void* q, const void* k, const void* v, void* out, float* lse,
                               int64_t bh, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal,
                               void* stream) {
  if (bh == 0 || t == 0) return "";
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    Forward<float>(q, k, v, out, lse, bh, t, s, d, dv, scale, causal, st);
  } else {
    Forward<uint16_t>(q, k, v, out, lse, bh, t, s, d, dv, scale, causal, st);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
