// core/ops/embedding.cu — CUDA kernels of embedding (row gather, grid-stride over output elements) and
// embedding_backward (deterministic: one block per touched table row, threads over columns, each element
// the fp32 sum of its gradient rows in ascending position order, grouped on the host by
// cuda/embedding_math.h — no atomics, bitwise the CPU kernel's sums in float32). float32 and bfloat16.
// The summation is host-tested by core/ops/cuda/loss_embedding_math_test.cc; checks stay in
// embedding_cuda.cc. Compiled with nvcc 13 for sm_90a + compute_90 PTX;
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/embedding_math.h"
#include "core/ops/cuda/row_kernels_launch.h"

namespace tessel::cuda {
namespace {

template <typename T>
__global__ void GatherKernel(const T* weight, const int64_t* idx, T* out, int64_t n, int64_t cols) {
  const int64_t total = n * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / cols, c = e % cols;
    out[e] = weight[idx[i] * cols + c];
  }
}

template <typename T>
__global__ void ScatterAddKernel(const T* grad, const int64_t* rows, const int64_t* offsets, const int64_t* positions,
                                 int64_t num_groups, T* table, int64_t cols) {
  for (int64_t u = blockIdx.x; u < num_groups; u += gridDim.x) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      StoreF(table, rows[u] * cols + c, SumGroup(grad, positions, offsets[u], offsets[u + 1], cols, c));
    }
  }
}

template <typename T>
void Gather(const void* weight, const int64_t* idx, void* out, int64_t n, int64_t cols, cudaStream_t s) {
  constexpr int kThreads = 256;
  const int64_t blocks = (n * cols + kThreads - 1) / kThreads;
  GatherKernel<T>
      <<<LaneBlocks(blocks), kThreads, 0, s>>>(static_cast<const T*>(weight), idx, static_cast<T*>(out), n, cols);
}

template <typename T>
void ScatterAdd(const void* grad, const int64_t* rows, const int64_t* offsets, const int64_t* positions,
                int64_t num_groups, void* table, int64_t cols, cudaStream_t s) {
  ScatterAddKernel<T><<<LaneBlocks(num_groups), BlockThreads(cols), 0, s>>>(
      static_cast<const T*>(grad), rows, offsets, positions, num_groups, static_cast<T*>(table), cols);
}

}  // namespace

const char* LaunchEmbedding(ElemType type, const void* weight, const int64_t* idx, void* out, int64_t n, int64_t cols,
                            void* stream) {
  if (n == 0 || cols == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    Gather<float>(weight, idx, out, n, cols, s);
  } else {
    Gather<uint16_t>(weight, idx, out, n, cols, s);
  }
  return LastLaunchError();
}

const char* LaunchEmbeddingBackward(ElemType type, const void* grad, const int64_t* rows, const int64_t* offsets,
                                    const int64_t* positions, int64_t num_groups, void* table, int64_t cols,
                                    void* stream) {
  if (num_groups == 0 || cols == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    ScatterAdd<float>(grad, rows, offsets, positions, num_groups, table, cols, s);
  } else {
    ScatterAdd<uint16_t>(grad, rows, offsets, positions, num_groups, table, cols, s);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
