// core/ops/norm.cu — CUDA kernels of layer_norm / rms_norm: the forward (one block per row: Σx, then
// Σ(x - mean)², then y), the fused backward's dx (one block per row: Σg and Σg(x - mean), then dx), and
// grad_weight / grad_bias as the CPU kernel blocks them (a partial per (column, row block), then one
// thread per column summing the blocks in order). float32 and bfloat16 with fp32 math; statistics fp32.
// The formulas are cuda/norm_math.h, run on the host by core/ops/cuda/row_kernels_test.cc against the CPU
// kernels; schema, checks and allocation stay in norm_cuda.cc.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/norm_math.h"
#include "core/ops/cuda/row_kernels_launch.h"

namespace tessel::cuda {
namespace {

constexpr int kColumnThreads = 256;

struct SquaredDeviation {
  float mean;
  __device__ float operator()(float v) const { return (v - mean) * (v - mean); }
};

template <typename T>
__global__ void NormForwardKernel(const T* x, const T* w, const T* b, T* y, float* mean, float* rstd, int64_t rows,
                                  int64_t cols, float eps) {
  __shared__ SumAcc slots[kMaxRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    float mu = 0.0f;
    if (mean != nullptr)
      mu = NormMean(BlockMerge(slots, RowSumPartial(xr, cols, threadIdx.x, blockDim.x, IdentityValue{})).sum, cols);
    const SumAcc ss = BlockMerge(slots, RowSumPartial(xr, cols, threadIdx.x, blockDim.x, SquaredDeviation{mu}));
    const float rs = NormRstd(ss.sum, cols, eps);
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      StoreF(y + r * cols, i, NormOut(LoadF(xr, i), mu, rs, w, b, i));
  }
}

template <bool kCentered, typename T>
__global__ void NormBackwardDxKernel(const T* dy, const T* x, const T* w, const float* mean, const float* rstd, T* dx,
                                     int64_t rows, int64_t cols) {
  __shared__ SumPairAcc slots[kMaxRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float mu = kCentered ? mean[r] : 0.0f;
    const T* dyr = dy + r * cols;
    const T* xr = x + r * cols;
    const SumPairAcc p = BlockMerge(slots, NormBackwardPartial(dyr, xr, w, mu, cols, threadIdx.x, blockDim.x));
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      StoreF(dx + r * cols, i, NormBackwardOut<kCentered>(LoadF(dyr, i), LoadF(xr, i), w, i, mu, rstd[r], p, cols));
    }
  }
}

// grid (column tiles, row blocks): partial[blk][0][i] = Σ dy (x - mean) rstd, partial[blk][1][i] = Σ dy.
template <typename T>
__global__ void NormParamPartialKernel(const T* dy, const T* x, const float* mean, const float* rstd, float* partial,
                                       int64_t cols, NormParamBlocks blocks) {
  const int64_t i = blockIdx.x * int64_t{kColumnThreads} + threadIdx.x;
  const int64_t blk = blockIdx.y;
  if (i >= cols) return;
  const SumPairAcc p = NormParamPartial(dy, x, mean, rstd, cols, blocks, blk, i);
  partial[blk * 2 * cols + i] = p.first;
  partial[blk * 2 * cols + cols + i] = p.second;
}

template <typename T>
__global__ void NormParamReduceKernel(const float* partial, T* dw, T* db, int64_t cols, int64_t num_blocks) {
  const int64_t i = blockIdx.x * int64_t{kColumnThreads} + threadIdx.x;
  if (i >= cols) return;
  SumPairAcc s = SumPairAcc::Identity();
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    s.Merge({partial[blk * 2 * cols + i], partial[blk * 2 * cols + cols + i]});
  }
  if (dw != nullptr) StoreF(dw, i, s.first);
  if (db != nullptr) StoreF(db, i, s.second);
}

int ColumnTiles(int64_t cols) { return static_cast<int>((cols + kColumnThreads - 1) / kColumnThreads); }

template <typename T>
void Forward(const void* x, const void* w, const void* b, void* y, float* mean, float* rstd, int64_t rows, int64_t cols,
             float eps, cudaStream_t s) {
  NormForwardKernel<T><<<LaneBlocks(rows), BlockThreads(cols), 0, s>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), mean, rstd,
      rows, cols, eps);
}

template <typename T>
void Backward(const void* dy, const void* x, const void* w, const float* mean, const float* rstd, void* dx, void* dw,
              void* db, float* partial, int64_t rows, int64_t cols, cudaStream_t s) {
  const T* tdy = static_cast<const T*>(dy);
  const T* tx = static_cast<const T*>(x);
  if (dx != nullptr) {
    const int blocks = LaneBlocks(rows), threads = BlockThreads(cols);
    const T* tw = static_cast<const T*>(w);
    if (mean != nullptr) {
      NormBackwardDxKernel<true, T>
          <<<blocks, threads, 0, s>>>(tdy, tx, tw, mean, rstd, static_cast<T*>(dx), rows, cols);
    } else {
      NormBackwardDxKernel<false, T>
          <<<blocks, threads, 0, s>>>(tdy, tx, tw, mean, rstd, static_cast<T*>(dx), rows, cols);
    }
  }
  if (dw == nullptr && db == nullptr) return;
  const NormParamBlocks pb = NormParamBlocks::Make(rows);
  const dim3 grid(ColumnTiles(cols), static_cast<unsigned>(pb.num_blocks));
  NormParamPartialKernel<T><<<grid, kColumnThreads, 0, s>>>(tdy, tx, mean, rstd, partial, cols, pb);
  NormParamReduceKernel<T><<<ColumnTiles(cols), kColumnThreads, 0, s>>>(partial, static_cast<T*>(dw),
                                                                        static_cast<T*>(db), cols, pb.num_blocks);
}

}  // namespace

const char* LaunchNormForward(ElemType type, const void* x, const void* w, const void* b, void* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, void* stream) {
  if (rows == 0 || cols == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    Forward<float>(x, w, b, y, mean, rstd, rows, cols, eps, s);
  } else {
    Forward<uint16_t>(x, w, b, y, mean, rstd, rows, cols, eps, s);
  }
  return LastLaunchError();
}

int64_t NormParamScratchFloats(int64_t rows, int64_t cols) { return NormParamBlocks::Make(rows).num_blocks * 2 * cols; }

const char* LaunchNormBackward(ElemType type, const void* dy, const void* x, const void* w, const float* mean,
                               const float* rstd, void* dx, void* dw, void* db, float* partial, int64_t rows,
                               int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    Backward<float>(dy, x, w, mean, rstd, dx, dw, db, partial, rows, cols, s);
  } else {
    Backward<uint16_t>(dy, x, w, mean, rstd, dx, dw, db, partial, rows, cols, s);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
