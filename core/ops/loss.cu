// core/ops/loss.cu — CUDA kernels of cross_entropy (log-softmax fused into the loss: one online max /
// Σexp pass per row, no probabilities stored) and its backward (softmax - onehot, scaled), one block per
// row; the "mean" / "sum" reduction is one block's tree sum of the per-row fp32 losses. float32 and
// bfloat16 logits with fp32 math. The formulas are cuda/loss_math.h, run on the host by
// core/ops/cuda/loss_embedding_math_test.cc against the CPU kernels; checks stay in loss_cuda.cc.
// Compiled with nvcc 13 for sm_90a + compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/loss_math.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/ops/cuda/softmax_math.h"

namespace tessel::cuda {
namespace {

template <typename T>
__global__ void CrossEntropyRowKernel(const T* logits, const int64_t* target, int64_t ignore, float* loss_rows,
                                      T* out_rows, int64_t rows, int64_t classes) {
  __shared__ MaxSumAcc slots[kMaxRowThreads];
  const Lanes l{rows, classes, 1};
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float loss = 0.0f;  // ignored rows (uniform over the block: one target per row)
    if (target[r] != ignore) {
      const MaxSumAcc m = BlockMerge(slots, SoftmaxPartial(logits, l, r * classes, threadIdx.x, blockDim.x));
      loss = CrossEntropyRowLoss(RowLogSumExp(m), LoadF(logits, r * classes + target[r]));
    }
    if (threadIdx.x == 0) {
      loss_rows[r] = loss;
      if (out_rows != nullptr) StoreF(out_rows, r, loss);
    }
  }
}

template <typename T>
__global__ void SumRowsKernel(const float* loss_rows, int64_t rows, float divisor, T* out) {
  __shared__ SumAcc slots[kMaxRowThreads];
  const SumAcc s = BlockMerge(slots, RowSumPartial(loss_rows, rows, threadIdx.x, blockDim.x, IdentityValue{}));
  if (threadIdx.x == 0) StoreF(out, 0, s.sum / divisor);
}

template <typename T>
__global__ void CrossEntropyBackwardKernel(const T* grad, bool per_row, float divisor, const T* logits,
                                           const int64_t* target, int64_t ignore, T* dx, int64_t rows,
                                           int64_t classes) {
  __shared__ MaxSumAcc slots[kMaxRowThreads];
  const Lanes l{rows, classes, 1};
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = target[r];
    if (t == ignore) {
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) StoreF(dx, r * classes + j, 0.0f);
      continue;
    }
    const float lse = RowLogSumExp(BlockMerge(slots, SoftmaxPartial(logits, l, r * classes, threadIdx.x, blockDim.x)));
    const float scale = CrossEntropyScale(grad, r, per_row, divisor);
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      StoreF(dx, r * classes + j, CrossEntropyGrad(LoadF(logits, r * classes + j), lse, scale, j == t));
    }
  }
}

template <typename T>
void Forward(const void* logits, const int64_t* target, int64_t ignore, float* loss_rows, void* out, bool reduce,
             float divisor, int64_t rows, int64_t classes, cudaStream_t s) {
  if (rows > 0) {
    CrossEntropyRowKernel<T>
        <<<LaneBlocks(rows), BlockThreads(classes), 0, s>>>(static_cast<const T*>(logits), target, ignore, loss_rows,
                                                            reduce ? nullptr : static_cast<T*>(out), rows, classes);
  }
  if (reduce) SumRowsKernel<T><<<1, kMaxRowThreads, 0, s>>>(loss_rows, rows, divisor, static_cast<T*>(out));
}

template <typename T>
void Backward(const void* grad, bool per_row, float divisor, const void* logits, const int64_t* target, int64_t ignore,
              void* dx, int64_t rows, int64_t classes, cudaStream_t s) {
  CrossEntropyBackwardKernel<T><<<LaneBlocks(rows), BlockThreads(classes), 0, s>>>(
      static_cast<const T*>(grad), per_row, divisor, static_cast<const T*>(logits), target, ignore, static_cast<T*>(dx),
      rows, classes);
}

}  // namespace

const char* LaunchCrossEntropy(ElemType type, const void* logits, const int64_t* target, int64_t ignore_index,
                               float* loss_rows, void* out, bool reduce, float divisor, int64_t rows, int64_t classes,
                               void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (rows == 0 && !reduce) return "";
  if (type == ElemType::kFloat32) {
    Forward<float>(logits, target, ignore_index, loss_rows, out, reduce, divisor, rows, classes, s);
  } else {
    Forward<uint16_t>(logits, target, ignore_index, loss_rows, out, reduce, divisor, rows, classes, s);
  }
  return LastLaunchError();
}

const char* LaunchCrossEntropyBackward(ElemType type, const void* grad, bool per_row, float divisor, const void* logits,
                                       const int64_t* target, int64_t ignore_index, void* dx, int64_t rows,
                                       int64_t classes, void* stream) {
  if (rows == 0 || classes == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    Backward<float>(grad, per_row, divisor, logits, target, ignore_index, dx, rows, classes, s);
  } else {
    Backward<uint16_t>(grad, per_row, divisor, logits, target, ignore_index, dx, rows, classes, s);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
