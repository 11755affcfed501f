// core/ops/dropout.cu — the CUDA dropout kernel (core/ops/dropout_cuda.cc): one grid-stride pass, one
// Philox block per element (cuda/dropout_math.h; the CPU kernel shares one block between four
// neighbours, with the same words). Compiled with nvcc 13 for sm_90a + compute_90 PTX;
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/dropout_launch.h"
#include "core/ops/cuda/dropout_math.h"
#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {
namespace {

template <typename T>
__global__ void DropoutKernel(T* out, const T* x, OffsetCalculator<3> calc, int64_t n, DropoutParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[3];
    calc.Get(i, off);
    const uint64_t c = p.first_counter + static_cast<uint64_t>(off[2]);
    const bool keep = DropoutKeeps(DropoutBlock(p.seed, c >> 2).w[c & 3], p.threshold);
    StoreF(out, off[0], __fmul_rn(LoadF(x, off[1]), keep ? p.scale : 0.0f));
  }
}

}  // namespace

const char* LaunchDropout(ElemType type, void* out, const void* x, const OffsetCalculator<3>& calc, int64_t n,
                          const DropoutParams& p, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int kThreads = 256;
  const int blocks = LaneBlocks((n + kThreads - 1) / kThreads);
  if (type == ElemType::kFloat32) {
    DropoutKernel<float><<<blocks, kThreads, 0, s>>>(static_cast<float*>(out), static_cast<const float*>(x), calc, n, p);
  } else {
    DropoutKernel<uint16_t>
        <<<blocks, kThreads, 0, s>>>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(x), calc, n, p);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
