// core/ops/attention.cu — flash-style CUDA forward of scaled_dot_product_attention: one block per (head,
// tile of 64 query rows), one thread per query row; key / value tiles of 32 rows are staged in shared
// memory as fp32 and every row folds them into its online softmax (cuda/flash_math.h, host-tested in this
// order against the CPU op); no score matrix is stored; under is_causal a block stops at its last row's
// keys. float32 and bfloat16 with fp32 math; head dims up to 128.
// These CUDA-core kernels (FMAs with a per-row accumulator in local memory) serve float32 and head dims
// the tensor-core path lacks; bfloat16 heads of d == dv in {16, 32, 64, 128} go to attention_tc.cu.
// Backward (no atomics): D_i = dO_i · O_i per row, then dq with one thread per query row over key tiles and
// dk / dv with one thread per key row over query tiles, P recomputed from the saved lse.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; run on an H200 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/attention_tc.h"
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

// D_i = dO_i · O_i for every row of every head.
template <typename T>
__global__ void FlashRowDotKernel(const T* dout, const T* out, float* dd, int64_t rows, int64_t dv) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x) {
    dd[r] = FlashDot(dout + r * dv, out + r * dv, dv);
  }
}

// Stages rows [r0, r0 + n) of a [rows, width] head slice into a shared tile (fp32, kMaxHeadDim pitch).
template <typename T>
__device__ void StageRows(float* tile, const T* src, int64_t r0, int64_t n, int64_t width) {
  for (int64_t e = threadIdx.x; e < n * width; e += blockDim.x) {
    tile[(e / width) * kMaxHeadDim + e % width] = LoadF(src, r0 * width + e);
  }
}

template <typename T>
__global__ void FlashDqKernel(const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* dd,
                              T* dq, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal) {
  __shared__ float ks[kTileK * kMaxHeadDim];
  __shared__ float vs[kTileK * kMaxHeadDim];
  const int64_t h = blockIdx.y, first = blockIdx.x * int64_t{kTileQ}, i = first + threadIdx.x;
  const bool active = i < t;
  const int64_t last = (first + kTileQ < t ? first + kTileQ : t) - 1;
  const int64_t block_end = FlashKeyEnd(last, s, causal), row_end = active ? FlashKeyEnd(i, s, causal) : 0;
  const int64_t row = h * t + (active ? i : 0);
  float acc[kMaxHeadDim];
  for (int64_t c = 0; c < d; ++c) acc[c] = 0.0f;
  for (int64_t j0 = 0; j0 < block_end; j0 += kTileK) {
    const int64_t n = block_end - j0 < kTileK ? block_end - j0 : kTileK;
    __syncthreads();
    StageRows(ks, k + h * s * d, j0, n, d);
    StageRows(vs, v + h * s * dv, j0, n, dv);
    __syncthreads();
    for (int64_t jj = 0; jj < n && j0 + jj < row_end; ++jj) {
      const float p = FlashProb(FlashScore(q + row * d, ks + jj * kMaxHeadDim, d, scale), lse[row]);
      const float ds = FlashDScore(p, FlashDot(dout + row * dv, vs + jj * kMaxHeadDim, dv), dd[row]);
      for (int64_t c = 0; c < d; ++c) acc[c] += ds * ks[jj * kMaxHeadDim + c];
    }
  }
  if (active) {
    for (int64_t c = 0; c < d; ++c) StoreF(dq, row * d + c, acc[c] * scale);
  }
}

template <typename T>
__global__ void FlashDkvKernel(const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* dd,
                               T* dk, T* dvo, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal) {
  __shared__ float qs[kTileK * kMaxHeadDim];
  __shared__ float gs[kTileK * kMaxHeadDim];
  const int64_t h = blockIdx.y, first = blockIdx.x * int64_t{kTileQ}, j = first + threadIdx.x;
  const bool active = j < s;
  const int64_t krow = h * s + (active ? j : 0);
  const int64_t begin = active ? FlashQueryBegin(j, causal) : t;
  float acc_k[kMaxHeadDim], acc_v[kMaxHeadDim];
  for (int64_t c = 0; c < d; ++c) acc_k[c] = 0.0f;
  for (int64_t c = 0; c < dv; ++c) acc_v[c] = 0.0f;
  for (int64_t i0 = FlashQueryBegin(first, causal); i0 < t; i0 += kTileK) {
    const int64_t n = t - i0 < kTileK ? t - i0 : kTileK;
    __syncthreads();
    StageRows(qs, q + h * t * d, i0, n, d);
    StageRows(gs, dout + h * t * dv, i0, n, dv);
    __syncthreads();
    for (int64_t ii = 0; ii < n; ++ii) {
      const int64_t i = i0 + ii;
      if (i < begin) continue;
      const float p = FlashProb(FlashScore(k + krow * d, qs + ii * kMaxHeadDim, d, scale), lse[h * t + i]);
      const float ds = FlashDScore(p, FlashDot(v + krow * dv, gs + ii * kMaxHeadDim, dv), dd[h * t + i]);
      for (int64_t c = 0; c < dv; ++c) acc_v[c] += p * gs[ii * kMaxHeadDim + c];
      for (int64_t c = 0; c < d; ++c) acc_k[c] += ds * qs[ii * kMaxHeadDim + c];
    }
  }
  if (active) {
    for (int64_t c = 0; c < d; ++c) StoreF(dk, krow * d + c, acc_k[c] * scale);
    for (int64_t c = 0; c < dv; ++c) StoreF(dvo, krow * dv + c, acc_v[c]);
  }
}

template <typename T>
void Forward(const void* q, const void* k, const void* v, void* out, float* lse, int64_t bh, int64_t t, int64_t s,
             int64_t d, int64_t dv, float scale, bool causal, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>((t + kTileQ - 1) / kTileQ), static_cast<unsigned>(bh));
  FlashForwardKernel<T><<<grid, kTileQ, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                                 static_cast<const T*>(v), static_cast<T*>(out), lse, t, s, d, dv,
                                                 scale, causal);
}

// dd = D_i = dO_i · O_i for each of rows rows (both backward paths start from it).
template <typename T>
void RowDots(const void* dout, const void* out, float* dd, int64_t rows, int64_t dv, cudaStream_t st) {
  FlashRowDotKernel<T><<<LaneBlocks((rows + 255) / 256), 256, 0, st>>>(static_cast<const T*>(dout),
                                                                     static_cast<const T*>(out), dd, rows, dv);
}

template <typename T>
void Backward(const void* dout, const void* q, const void* k, const void* v, const void* out, const float* lse,
              void* dq, void* dk, void* dvo, float* dd, int64_t bh, int64_t t, int64_t s, int64_t d, int64_t dv,
              float scale, bool causal, cudaStream_t st) {
  const T *tg = static_cast<const T*>(dout), *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k);
  const T* tv = static_cast<const T*>(v);
  RowDots<T>(dout, out, dd, bh * t, dv, st);
  const dim3 qgrid(static_cast<unsigned>((t + kTileQ - 1) / kTileQ), static_cast<unsigned>(bh));
  FlashDqKernel<T><<<qgrid, kTileQ, 0, st>>>(tg, tq, tk, tv, lse, dd, static_cast<T*>(dq), t, s, d, dv, scale, causal);
  if (s == 0) return;
  const dim3 kgrid(static_cast<unsigned>((s + kTileQ - 1) / kTileQ), static_cast<unsigned>(bh));
  FlashDkvKernel<T><<<kgrid, kTileQ, 0, st>>>(tg, tq, tk, tv, lse, dd, static_cast<T*>(dk), static_cast<T*>(dvo), t, s,
                                              d, dv, scale, causal);
}

}  // namespace

const char* LaunchFlashBackward(ElemType type, const void* dout, const void* q, const void* k, const void* v,
                                const void* out, const float* lse, void* dq, void* dk, void* dv_out, float* dd,
                                int64_t bh, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal,
                                void* stream) {
  if (bh == 0 || (t == 0 && s == 0)) return "";
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (t == 0) {  // no queries: zero key / value gradients
    cudaMemsetAsync(dk, 0, bh * s * d * (type == ElemType::kFloat32 ? 4 : 2), st);
    cudaMemsetAsync(dv_out, 0, bh * s * dv * (type == ElemType::kFloat32 ? 4 : 2), st);
    return LastLaunchError();
  }
  if (type == ElemType::kFloat32) {
    Backward<float>(dout, q, k, v, out, lse, dq, dk, dv_out, dd, bh, t, s, d, dv, scale, causal, st);
  } else if (TcAttentionApplies(d, dv, t, s, {dout, q, k, v, out, dq, dk, dv_out})) {
    RowDots<uint16_t>(dout, out, dd, bh * t, dv, st);
    TcAttentionBackward(dout, q, k, v, lse, dd, dq, dk, dv_out, bh, t, s, d, scale, causal, st);
  } else {
    Backward<uint16_t>(dout, q, k, v, out, lse, dq, dk, dv_out, dd, bh, t, s, d, dv, scale, causal, st);
  }
  return LastLaunchError();
}

const char* LaunchFlashForward(ElemType type, const void* q, const void* k, const void* v, void* out, float* lse,
                               int64_t bh, int64_t t, int64_t s, int64_t d, int64_t dv, float scale, bool causal,
                               void* stream) {
  if (bh == 0 || t == 0) return "";
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    Forward<float>(q, k, v, out, lse, bh, t, s, d, dv, scale, causal, st);
  } else if (TcAttentionApplies(d, dv, t, s, {q, k, v, out})) {
    TcAttentionForward(q, k, v, out, lse, bh, t, s, d, scale, causal, st);
  } else {
    Forward<uint16_t>(q, k, v, out, lse, bh, t, s, d, dv, scale, causal, st);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
