// core/ops/cuda/block_merge.cuh — device side of cuda/row_reduce.h for the .cu files (softmax.cu,
// norm.cu): the block's tree merge around __syncthreads(), grid sizing, 16-byte alignment and the
// launch-error string.
//
// Invariant: BlockMerge runs TreeStep for s = blockDim.x / 2, ..., 1 exactly as EmulateBlockReduce does
// on the host (blockDim.x a power of two, <= kMaxRowThreads), returns slot 0 to every thread and leaves
// the slots free for the next call.
//
// Example:
//   __shared__ SumAcc slots[kMaxRowThreads];
//   const SumAcc r = BlockMerge(slots, RowSumPartial(row, cols, threadIdx.x, blockDim.x, f));
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

template <typename Acc>
__device__ Acc BlockMerge(Acc* slots, Acc mine) {
  slots[threadIdx.x] = mine;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    TreeStep(slots, static_cast<int>(threadIdx.x), s);
    __syncthreads();
  }
  const Acc r = slots[0];
  __syncthreads();
  return r;
}

// f(v) = v, for RowSumPartial.
struct IdentityValue {
  __device__ float operator()(float v) const { return v; }
};

// Blocks for `lanes` block-per-lane work items (grid-stride beyond 2^20).
inline int LaneBlocks(int64_t lanes) {
  constexpr int64_t kMax = int64_t{1} << 20;
  return static_cast<int>(lanes < kMax ? lanes : kMax);
}

// Whether p suits 16-byte vector loads and stores (uint4).
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline const char* LastLaunchError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

}  // namespace tessel::cuda
