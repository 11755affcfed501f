// core/ops/attention_tc.cu — the bfloat16 path of tessel's CUDA flash attention on tensor cores (WMMA
// 16x16x16 bf16 products, fp32 accumulation), FlashAttention-2's algorithm: the forward streams key / value
// tiles of 64 rows past a block's 64 query rows (4 warps x 16 rows) with an online softmax; the backward
// runs one kernel per key tile for dK / dV (queries streamed past it) and one per query tile for dQ (keys
// streamed), each recomputing P from the saved lse, so no atomics and a deterministic result. Scores live
// only as one [16, 64] tile per warp in shared memory. attention.cu sends here bfloat16 heads with
// d == dv in {16, 32, 64, 128}, s > 0 and 16-byte aligned pointers; everything else (float32, odd head
// dims) stays on its CUDA-core kernels.
//
// Why by hand: cuDNN's fused attention is not among the libraries tessel links, and a score matrix through
// cuBLASLt would be [bh, t, s] in memory (the first H200 run: the CUDA-core kernels took 93.7 ms for a
// GPT-2 layer's causal fwd+bwd at [8, 12, 1024, 64] against torch SDPA's 0.36 ms).
//
// Invariant: out and lse equal flash_math.h's definition (softmax in fp32 from bf16 products; P rounded
// to bf16 before P·V, the running sum from fp32 P, as FlashAttention-2); dq, dk, dv from P and
// dS = P (dO·v - D) rounded to bf16 before their products. Rows past t and keys past s are zero-filled in
// shared memory and masked, never written.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <atomic>
#include <cstdint>

#include "core/ops/cuda/attention_tc.h"
#include "core/ops/cuda/block_merge.cuh"

namespace tessel::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;     // query rows (forward, dQ) or key rows (dK / dV) per block: 4 warps x 16
constexpr int kCols = 64;     // streamed rows per tile
constexpr int kThreads = 128;
constexpr int kLdS = kCols + 4;  // fp32 score tile pitch
constexpr int kLdP = kCols + 8;  // bf16 probability tile pitch
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Shared-memory carving: consecutive regions, each rounded up to 128 bytes.
struct Carver {
  unsigned char* p;
  template <typename T>
  __device__ T* Take(int64_t elems) {
    T* r = reinterpret_cast<T*>(p);
    p += (elems * static_cast<int64_t>(sizeof(T)) + 127) / 128 * 128;
    return r;
  }
};

constexpr int64_t Round128(int64_t bytes) { return (bytes + 127) / 128 * 128; }

// Copies rows [r0, r0 + kRows) of a [rows, D] bf16 matrix into a [kRows, D + 8] tile, zeros past `rows`.
template <int D>
__device__ void StageTile(bf16* tile, const bf16* src, int64_t r0, int64_t rows) {
  constexpr int kVec = D / 8;  // 16-byte chunks per row
  for (int e = threadIdx.x; e < kRows * kVec; e += kThreads) {
    const int r = e / kVec, c = (e % kVec) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) val = *reinterpret_cast<const uint4*>(src + (r0 + r) * D + c);
    *reinterpret_cast<uint4*>(tile + r * (D + 8) + c) = val;
  }
}

// out[16, 16 * n .. ] = A (16 x K, row-major at a, pitch lda) times B, where B is (K x 64) given as
// b_t's rows (col_major: B(k, n) = b_t[n][k]) — a warp's score tile.
template <int K>
__device__ void WarpTimesTransposed(float* out, const bf16* a, int lda, const bf16* b_t, int ldb) {
  for (int n = 0; n < kCols / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, b_t + n * 16 * ldb + kk * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kLdS, wmma::mem_row_major);
  }
}

// acc[n] += A (16 x 64 bf16 at a, pitch kLdP) times B (64 x D row-major at b, pitch D + 8).
template <int D>
__device__ void WarpAccumulate(FragC (&acc)[D / 16], const bf16* a, const bf16* b) {
#pragma unroll
  for (int kk = 0; kk < kCols / 16; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + kk * 16, kLdP);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * (D + 8) + n * 16, D + 8);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x D accumulators (times `scale`) as bf16 rows [row0, row0 + 16) of dst ([rows, D]),
// through the warp's fp32 staging tile (pitch D + 4).
template <int D>
__device__ void StoreRows(FragC (&acc)[D / 16], float scale, float* stage, bf16* dst, int64_t row0, int64_t rows) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    for (int i = 0; i < acc[n].num_elements; ++i) acc[n].x[i] *= scale;
    wmma::store_matrix_sync(stage + n * 16, acc[n], D + 4, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = e / D, c = e % D;
    if (row0 + r < rows) dst[(row0 + r) * D + c] = __float2bfloat16(stage[r * (D + 4) + c]);
  }
  __syncwarp();
}

template <int D>
constexpr int64_t ForwardSmemBytes() {
  return 3 * Round128(kRows * (D + 8) * 2) + Round128(4 * 16 * kLdS * 4) + Round128(4 * 16 * kLdP * 2) +
         Round128(4 * 16 * 16 * 4) + 2 * Round128(kRows * 4);
}

// The output accumulators stay in registers (one 16 x D row block per warp) across key tiles. Rescaling
// them by each row's exp(m_old - m_new) needs the accumulator layout, which WMMA leaves opaque: the warp
// writes a 16 x 16 tile whose row r holds row r's factor and loads it as an accumulator fragment, so
// element i of that fragment is element i's row factor whatever the layout.
template <int D>
__global__ void __launch_bounds__(kThreads) TcForwardKernel(const bf16* q, const bf16* k, const bf16* v, bf16* out,
                                                            float* lse, int64_t t, int64_t s, float scale_log2,
                                                            bool causal) {
  extern __shared__ __align__(128) unsigned char smem[];
  Carver cv{smem};
  bf16* qs = cv.Take<bf16>(kRows * (D + 8));
  bf16* ks = cv.Take<bf16>(kCols * (D + 8));
  bf16* vs = cv.Take<bf16>(kCols * (D + 8));
  float* ss = cv.Take<float>(4 * 16 * kLdS);
  bf16* ps = cv.Take<bf16>(4 * 16 * kLdP);
  float* row_factor = cv.Take<float>(4 * 16 * 16);
  float* ms = cv.Take<float>(kRows);
  float* ls = cv.Take<float>(kRows);
  const int64_t h = blockIdx.y, q0 = blockIdx.x * int64_t{kRows};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bf16* kh = k + h * s * D;
  const bf16* vh = v + h * s * D;
  StageTile<D>(qs, q + h * t * D, q0, t);
  if (threadIdx.x < kRows) {
    ms[threadIdx.x] = -INFINITY;
    ls[threadIdx.x] = 0.0f;
  }
  const int64_t last = (q0 + kRows < t ? q0 + kRows : t) - 1;
  const int64_t kv_end = causal ? (last + 1 < s ? last + 1 : s) : s;
  float* sw = ss + warp * 16 * kLdS;
  bf16* pw = ps + warp * 16 * kLdP;
  float* fw = row_factor + warp * 16 * 16;
  FragC acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  for (int64_t j0 = 0; j0 < kv_end; j0 += kCols) {
    __syncthreads();  // the previous tile is consumed (and, the first time, q and the stats are staged)
    StageTile<D>(ks, kh, j0, s);
    StageTile<D>(vs, vh, j0, s);
    __syncthreads();
    WarpTimesTransposed<D>(sw, qs + warp * 16 * (D + 8), D + 8, ks, D + 8);
    __syncwarp();
    {  // online softmax: two lanes per row, 32 keys each
      const int r = lane >> 1, half = lane & 1, rr = warp * 16 + r;
      const int64_t i = q0 + rr;
      const int64_t key_lim = causal ? (i + 1 < s ? i + 1 : s) : s;
      float* srow = sw + r * kLdS + half * 32;
      float mx = -INFINITY;
      for (int c = 0; c < 32; ++c) {
        const float x = j0 + half * 32 + c < key_lim ? srow[c] * scale_log2 : -INFINITY;
        srow[c] = x;
        mx = fmaxf(mx, x);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = ms[rr];
      const float m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
      bf16* prow = pw + r * kLdP + half * 32;
      for (int c = 0; c < 32; ++c) {
        const float p = exp2f(srow[c] - m_use);
        prow[c] = __float2bfloat16(p);
        sum += p;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float alpha = exp2f(m_old - m_use);  // 0 while the row has seen no key
      for (int c = 0; c < 8; ++c) fw[r * 16 + half * 8 + c] = alpha;
      __syncwarp();
      if (half == 0) {
        ls[rr] = ls[rr] * alpha + sum;
        ms[rr] = m_new;
      }
    }
    __syncwarp();
    FragC factor;
    wmma::load_matrix_sync(factor, fw, 16, wmma::mem_row_major);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      for (int e = 0; e < acc[n].num_elements; ++e) acc[n].x[e] *= factor.x[e];
    }
    WarpAccumulate<D>(acc, pw, vs);
  }
  __syncthreads();  // every warp is done with the key / value tiles: they become the output staging
  float* stage = reinterpret_cast<float*>(ks) + warp * 16 * (D + 4);
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(stage + n * 16, acc[n], D + 4, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = e / D, c = e % D, rr = warp * 16 + r;
    const int64_t i = q0 + rr;
    if (i < t) {
      const float l = ls[rr];
      out[(h * t + i) * D + c] = __float2bfloat16(l > 0.0f ? stage[r * (D + 4) + c] / l : 0.0f);
    }
  }
  if (lane < 16) {
    const int rr = warp * 16 + lane;
    const int64_t i = q0 + rr;
    if (i < t) lse[h * t + i] = ls[rr] > 0.0f ? (ms[rr] + log2f(ls[rr])) * kLn2 : -INFINITY;
  }
}

template <int D>
constexpr int64_t BackwardSmemBytes() {
  return 4 * Round128(kRows * (D + 8) * 2) + 2 * Round128(4 * 16 * kLdS * 4) + 2 * Round128(4 * 16 * kLdP * 2) +
         Round128(kRows * (D + 4) * 4) + 2 * Round128(kCols * 4);
}

// The shared memory of both backward kernels, carved in BackwardSmemBytes' order: two resident [64, D]
// tiles (dK/dV: k, v; dQ: q, dO), two streamed ones (dK/dV: q, dO; dQ: k, v), per warp two fp32 [16, 64]
// product tiles and two bf16 [16, 64] operand tiles, the fp32 output staging and the streamed rows' lse
// (log2 units) and D.
template <int D>
struct BackwardTiles {
  bf16 *resident0, *resident1, *streamed0, *streamed1;
  float *prod0, *prod1;
  bf16 *operand0, *operand1;
  float *stage, *lse2, *dd;

  __device__ explicit BackwardTiles(unsigned char* smem) {
    Carver cv{smem};
    resident0 = cv.Take<bf16>(kRows * (D + 8));
    resident1 = cv.Take<bf16>(kRows * (D + 8));
    streamed0 = cv.Take<bf16>(kCols * (D + 8));
    streamed1 = cv.Take<bf16>(kCols * (D + 8));
    prod0 = cv.Take<float>(4 * 16 * kLdS);
    prod1 = cv.Take<float>(4 * 16 * kLdS);
    operand0 = cv.Take<bf16>(4 * 16 * kLdP);
    operand1 = cv.Take<bf16>(4 * 16 * kLdP);
    stage = cv.Take<float>(kRows * (D + 4));
    lse2 = cv.Take<float>(kCols);
    dd = cv.Take<float>(kCols);
  }
};

// Stages lse (as log2 units) and D for rows [r0, r0 + kCols): +inf / 0 past t, so P is 0 there.
__device__ void StageRowStats(float* lse2, float* dd_s, const float* lse, const float* dd, int64_t r0, int64_t t) {
  for (int e = threadIdx.x; e < kCols; e += kThreads) {
    const bool in = r0 + e < t;
    lse2[e] = in ? lse[r0 + e] * kLog2e : INFINITY;
    dd_s[e] = in ? dd[r0 + e] : 0.0f;
  }
}

// dK, dV for one block of 64 keys (warp w: keys k0 + 16 w ..), queries streamed in tiles of 64.
template <int D>
__global__ void __launch_bounds__(kThreads)
    TcDkvKernel(const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const float* lse, const float* dd,
                bf16* dk, bf16* dv, int64_t t, int64_t s, float scale, float scale_log2, bool causal) {
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<D> tiles(smem);
  bf16 *ks = tiles.resident0, *vs = tiles.resident1, *qs = tiles.streamed0, *gs = tiles.streamed1;
  float *ss = tiles.prod0, *dps = tiles.prod1, *stage = tiles.stage, *lse2 = tiles.lse2, *dd_s = tiles.dd;
  bf16 *pts = tiles.operand0, *dsts = tiles.operand1;
  const int64_t h = blockIdx.y, k0 = blockIdx.x * int64_t{kRows};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  StageTile<D>(ks, k + h * s * D, k0, s);
  StageTile<D>(vs, v + h * s * D, k0, s);
  float* sw = ss + warp * 16 * kLdS;
  float* dpw = dps + warp * 16 * kLdS;
  bf16* ptw = pts + warp * 16 * kLdP;
  bf16* dstw = dsts + warp * 16 * kLdP;
  FragC acc_k[D / 16], acc_v[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(acc_k[n], 0.0f);
    wmma::fill_fragment(acc_v[n], 0.0f);
  }
  for (int64_t i0 = causal ? k0 : 0; i0 < t; i0 += kCols) {
    __syncthreads();
    StageTile<D>(qs, q + h * t * D, i0, t);
    StageTile<D>(gs, dout + h * t * D, i0, t);
    StageRowStats(lse2, dd_s, lse + h * t, dd + h * t, i0, t);
    __syncthreads();
    WarpTimesTransposed<D>(sw, ks + warp * 16 * (D + 8), D + 8, qs, D + 8);   // S^T: keys x queries
    WarpTimesTransposed<D>(dpw, vs + warp * 16 * (D + 8), D + 8, gs, D + 8);  // (dO V^T)^T
    __syncwarp();
    {
      const int r = lane >> 1, half = lane & 1;
      const int64_t j = k0 + warp * 16 + r;
      for (int c = 0; c < 32; ++c) {
        const int col = half * 32 + c;
        const int64_t i = i0 + col;
        const bool live = j < s && (!causal || i >= j);
        const float p = live ? exp2f(sw[r * kLdS + col] * scale_log2 - lse2[col]) : 0.0f;
        ptw[r * kLdP + col] = __float2bfloat16(p);
        dstw[r * kLdP + col] = __float2bfloat16(p * (dpw[r * kLdS + col] - dd_s[col]));
      }
    }
    __syncwarp();
    WarpAccumulate<D>(acc_v, ptw, gs);
    WarpAccumulate<D>(acc_k, dstw, qs);
  }
  float* stw = stage + warp * 16 * (D + 4);
  StoreRows<D>(acc_k, scale, stw, dk + h * s * D, k0 + warp * 16, s);
  StoreRows<D>(acc_v, 1.0f, stw, dv + h * s * D, k0 + warp * 16, s);
}

// dQ for one block of 64 queries (warp w: rows q0 + 16 w ..), keys streamed in tiles of 64.
template <int D>
__global__ void __launch_bounds__(kThreads)
    TcDqKernel(const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const float* lse, const float* dd,
               bf16* dq, int64_t t, int64_t s, float scale, float scale_log2, bool causal) {
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<D> tiles(smem);  // operand1 unused here: one layout (and size) for both kernels
  bf16 *qs = tiles.resident0, *gs = tiles.resident1, *ks = tiles.streamed0, *vs = tiles.streamed1;
  float *ss = tiles.prod0, *dps = tiles.prod1, *stage = tiles.stage, *lse2 = tiles.lse2, *dd_s = tiles.dd;
  bf16* dss = tiles.operand0;
  const int64_t h = blockIdx.y, q0 = blockIdx.x * int64_t{kRows};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  StageTile<D>(qs, q + h * t * D, q0, t);
  StageTile<D>(gs, dout + h * t * D, q0, t);
  StageRowStats(lse2, dd_s, lse + h * t, dd + h * t, q0, t);
  const int64_t last = (q0 + kRows < t ? q0 + kRows : t) - 1;
  const int64_t kv_end = causal ? (last + 1 < s ? last + 1 : s) : s;
  float* sw = ss + warp * 16 * kLdS;
  float* dpw = dps + warp * 16 * kLdS;
  bf16* dsw = dss + warp * 16 * kLdP;
  FragC acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  for (int64_t j0 = 0; j0 < kv_end; j0 += kCols) {
    __syncthreads();
    StageTile<D>(ks, k + h * s * D, j0, s);
    StageTile<D>(vs, v + h * s * D, j0, s);
    __syncthreads();
    WarpTimesTransposed<D>(sw, qs + warp * 16 * (D + 8), D + 8, ks, D + 8);
    WarpTimesTransposed<D>(dpw, gs + warp * 16 * (D + 8), D + 8, vs, D + 8);
    __syncwarp();
    {
      const int r = lane >> 1, half = lane & 1, rr = warp * 16 + r;
      const int64_t i = q0 + rr;
      for (int c = 0; c < 32; ++c) {
        const int col = half * 32 + c;
        const int64_t j = j0 + col;
        const bool live = i < t && j < s && (!causal || j <= i);
        const float p = live ? exp2f(sw[r * kLdS + col] * scale_log2 - lse2[rr]) : 0.0f;
        dsw[r * kLdP + col] = __float2bfloat16(p * (dpw[r * kLdS + col] - dd_s[rr]));
      }
    }
    __syncwarp();
    WarpAccumulate<D>(acc, dsw, ks);
  }
  StoreRows<D>(acc, scale, stage + warp * 16 * (D + 4), dq + h * t * D, q0 + warp * 16, t);
}

// Lets `kernel` take `bytes` of dynamic shared memory (over the 48 KiB default) on the current device. The
// attribute belongs to the kernel as loaded on one device, so it is set once per device (`done` holds one
// bit per device index; two threads racing both set it, which is harmless).
template <typename Kernel>
void AllowSmem(Kernel kernel, int64_t bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  cudaGetDevice(&device);
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  done.fetch_or(bit, std::memory_order_release);
}

template <int D>
void Forward(const void* q, const void* k, const void* v, void* out, float* lse, int64_t bh, int64_t t, int64_t s,
             float scale, bool causal, cudaStream_t st) {
  constexpr int64_t bytes = ForwardSmemBytes<D>();
  static std::atomic<uint64_t> allowed{0};
  AllowSmem(TcForwardKernel<D>, bytes, allowed);
  const dim3 grid(static_cast<unsigned>((t + kRows - 1) / kRows), static_cast<unsigned>(bh));
  TcForwardKernel<D><<<grid, kThreads, bytes, st>>>(static_cast<const bf16*>(q), static_cast<const bf16*>(k),
                                                    static_cast<const bf16*>(v), static_cast<bf16*>(out), lse, t, s,
                                                    scale * kLog2e, causal);
}

template <int D>
void Backward(const void* dout, const void* q, const void* k, const void* v, const float* lse, const float* dd,
              void* dq, void* dk, void* dv, int64_t bh, int64_t t, int64_t s, float scale, bool causal,
              cudaStream_t st) {
  constexpr int64_t bytes = BackwardSmemBytes<D>();
  static std::atomic<uint64_t> allowed_dkv{0}, allowed_dq{0};
  AllowSmem(TcDkvKernel<D>, bytes, allowed_dkv);
  AllowSmem(TcDqKernel<D>, bytes, allowed_dq);
  const auto *g = static_cast<const bf16*>(dout), *tq = static_cast<const bf16*>(q);
  const auto *tk = static_cast<const bf16*>(k), *tv = static_cast<const bf16*>(v);
  const dim3 kgrid(static_cast<unsigned>((s + kRows - 1) / kRows), static_cast<unsigned>(bh));
  TcDkvKernel<D><<<kgrid, kThreads, bytes, st>>>(g, tq, tk, tv, lse, dd, static_cast<bf16*>(dk),
                                                 static_cast<bf16*>(dv), t, s, scale, scale * kLog2e, causal);
  const dim3 qgrid(static_cast<unsigned>((t + kRows - 1) / kRows), static_cast<unsigned>(bh));
  TcDqKernel<D><<<qgrid, kThreads, bytes, st>>>(g, tq, tk, tv, lse, dd, static_cast<bf16*>(dq), t, s, scale,
                                                scale * kLog2e, causal);
}

}  // namespace

bool TcAttentionApplies(int64_t d, int64_t dv, int64_t t, int64_t s, std::initializer_list<const void*> pointers) {
  if (d != dv || (d != 16 && d != 32 && d != 64 && d != 128) || s <= 0 || t <= 0) return false;
  for (const void* p : pointers) {
    if (!Aligned16(p)) return false;
  }
  return true;
}

void TcAttentionForward(const void* q, const void* k, const void* v, void* out, float* lse, int64_t bh, int64_t t,
                        int64_t s, int64_t d, float scale, bool causal, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (d) {
    case 16: return Forward<16>(q, k, v, out, lse, bh, t, s, scale, causal, st);
    case 32: return Forward<32>(q, k, v, out, lse, bh, t, s, scale, causal, st);
    case 64: return Forward<64>(q, k, v, out, lse, bh, t, s, scale, causal, st);
    default: return Forward<128>(q, k, v, out, lse, bh, t, s, scale, causal, st);
  }
}

void TcAttentionBackward(const void* dout, const void* q, const void* k, const void* v, const float* lse,
                         const float* dd, void* dq, void* dk, void* dv, int64_t bh, int64_t t, int64_t s, int64_t d,
                         float scale, bool causal, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (d) {
    case 16: return Backward<16>(dout, q, k, v, lse, dd, dq, dk, dv, bh, t, s, scale, causal, st);
    case 32: return Backward<32>(dout, q, k, v, lse, dd, dq, dk, dv, bh, t, s, scale, causal, st);
    case 64: return Backward<64>(dout, q, k, v, lse, dd, dq, dk, dv, bh, t, s, scale, causal, st);
    default: return Backward<128>(dout, q, k, v, lse, dd, dq, dk, dv, bh, t, s, scale, causal, st);
  }
}

}  // namespace tessel::cuda
