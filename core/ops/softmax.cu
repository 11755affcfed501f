// core/ops/softmax.cu — CUDA kernels of the softmax family: softmax / log_softmax and their backward,
// one block per lane (cuda/row_reduce.h), float32 and bfloat16 with fp32 math. The per-thread partials
// and per-element formulas are cuda/softmax_math.h, run on the host by core/ops/cuda/row_kernels_test.cc
// against the CPU kernels; schema, checks and allocation stay in softmax_cuda.cc.
// Lanes with K > 1 (dim not last) read strided, uncoalesced memory: correct, not tuned.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/ops/cuda/softmax_math.h"

namespace tessel::cuda {
namespace {

template <bool kLog, typename T>
__global__ void SoftmaxKernel(const T* x, T* y, Lanes l) {
  __shared__ MaxSumAcc slots[kMaxRowThreads];
  for (int64_t lane = blockIdx.x; lane < l.count(); lane += gridDim.x) {
    const int64_t base = l.Base(lane);
    const MaxSumAcc r = BlockMerge(slots, SoftmaxPartial(x, l, base, threadIdx.x, blockDim.x));
    for (int64_t i = threadIdx.x; i < l.n; i += blockDim.x) {
      const int64_t j = base + i * l.k;
      StoreF(y, j, SoftmaxOut<kLog>(LoadF(x, j), r));
    }
  }
}

template <bool kLog, typename T>
__global__ void SoftmaxBackwardKernel(const T* g, const T* y, T* dx, Lanes l) {
  __shared__ SumAcc slots[kMaxRowThreads];
  for (int64_t lane = blockIdx.x; lane < l.count(); lane += gridDim.x) {
    const int64_t base = l.Base(lane);
    const SumAcc r = BlockMerge(slots, SoftmaxBackwardPartial<kLog>(g, y, l, base, threadIdx.x, blockDim.x));
    for (int64_t i = threadIdx.x; i < l.n; i += blockDim.x) {
      const int64_t j = base + i * l.k;
      StoreF(dx, j, SoftmaxBackwardOut<kLog>(LoadF(g, j), LoadF(y, j), r.sum));
    }
  }
}

template <bool kLog, typename T>
void Forward(const void* x, void* y, const Lanes& l, cudaStream_t s) {
  SoftmaxKernel<kLog, T>
      <<<LaneBlocks(l.count()), BlockThreads(l.n), 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), l);
}

template <bool kLog, typename T>
void Backward(const void* g, const void* y, void* dx, const Lanes& l, cudaStream_t s) {
  SoftmaxBackwardKernel<kLog, T><<<LaneBlocks(l.count()), BlockThreads(l.n), 0, s>>>(
      static_cast<const T*>(g), static_cast<const T*>(y), static_cast<T*>(dx), l);
}

}  // namespace

const char* LaunchSoftmax(bool log, ElemType type, const void* x, void* y, const Lanes& l, void* stream) {
  if (l.count() == 0 || l.n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool f32 = type == ElemType::kFloat32;
  if (log) {
    f32 ? Forward<true, float>(x, y, l, s) : Forward<true, uint16_t>(x, y, l, s);
  } else {
    f32 ? Forward<false, float>(x, y, l, s) : Forward<false, uint16_t>(x, y, l, s);
  }
  return LastLaunchError();
}

const char* LaunchSoftmaxBackward(bool log, ElemType type, const void* g, const void* y, void* dx, const Lanes& l,
                                  void* stream) {
  if (l.count() == 0 || l.n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool f32 = type == ElemType::kFloat32;
  if (log) {
    f32 ? Backward<true, float>(g, y, dx, l, s) : Backward<true, uint16_t>(g, y, dx, l, s);
  } else {
    f32 ? Backward<false, float>(g, y, dx, l, s) : Backward<false, uint16_t>(g, y, dx, l, s);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
