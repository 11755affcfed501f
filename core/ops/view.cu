// core/ops/view.cu — the CUDA strided copy (grid-stride over dst's elements, offsets from the shared
// OffsetCalculator) that CopyInto uses for strided and broadcast CUDA tensors, so contiguous(), copy_
// into views and the view ops' backward scatters run on the device; and its float32 <-> bfloat16
// converting twin (cast, mixed-precision copies). Compiled with nvcc 13 for sm_90a +
// compute_90 PTX; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include <type_traits>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/convert_math.h"
#include "core/ops/cuda/copy_launch.h"

namespace tessel::cuda {
namespace {

template <typename W>
__global__ void StridedCopyKernel(W* dst, const W* src, OffsetCalculator<2> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    calc.Get(i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <typename W>
void Launch(void* dst, const void* src, const OffsetCalculator<2>& calc, int64_t n, cudaStream_t s) {
  constexpr int kThreads = 256;
  StridedCopyKernel<W><<<LaneBlocks((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      static_cast<W*>(dst), static_cast<const W*>(src), calc, n);
}

template <typename TOut, typename TIn>
__global__ void ConvertCopyKernel(TOut* dst, const TIn* src, OffsetCalculator<2> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    ConvertAt(dst, src, calc, i);
  }
}

template <typename TOut, typename TIn>
void LaunchConvert(void* dst, const void* src, const OffsetCalculator<2>& calc, int64_t n, cudaStream_t s) {
  constexpr int kThreads = 256;
  ConvertCopyKernel<TOut, TIn><<<LaneBlocks((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      static_cast<TOut*>(dst), static_cast<const TIn*>(src), calc, n);
}

template <typename TOut>
bool LaunchFrom(ConvertType src_type, void* dst, const void* src, const OffsetCalculator<2>& calc, int64_t n,
                cudaStream_t s) {
  if (src_type == ConvertType::kFloat32) {
    if constexpr (std::is_same_v<TOut, float>) return false;
    else LaunchConvert<TOut, float>(dst, src, calc, n, s);
  } else if (src_type == ConvertType::kBFloat16) {
    if constexpr (std::is_same_v<TOut, uint16_t>) return false;
    else LaunchConvert<TOut, uint16_t>(dst, src, calc, n, s);
  } else {
    if constexpr (std::is_same_v<TOut, uint8_t>) return false;
    else LaunchConvert<TOut, uint8_t>(dst, src, calc, n, s);
  }
  return true;
}

}  // namespace

const char* LaunchConvertCopy(ConvertType dst_type, ConvertType src_type, void* dst, const void* src,
                              const OffsetCalculator<2>& calc, int64_t n, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool launched = dst_type == ConvertType::kFloat32    ? LaunchFrom<float>(src_type, dst, src, calc, n, s)
                        : dst_type == ConvertType::kBFloat16 ? LaunchFrom<uint16_t>(src_type, dst, src, calc, n, s)
                                                             : LaunchFrom<uint8_t>(src_type, dst, src, calc, n, s);
  if (!launched) return "LaunchConvertCopy: the two sides have one dtype (use LaunchStridedCopy)";
  return LastLaunchError();
}

const char* LaunchStridedCopy(int64_t element_bytes, void* dst, const void* src, const OffsetCalculator<2>& calc,
                              int64_t n, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (element_bytes) {
    case 1:
      Launch<uint8_t>(dst, src, calc, n, s);
      break;
    case 2:
      Launch<uint16_t>(dst, src, calc, n, s);
      break;
    case 4:
      Launch<uint32_t>(dst, src, calc, n, s);
      break;
    case 8:
      Launch<uint64_t>(dst, src, calc, n, s);
      break;
    case 16:  // widened elements (cuda/copy_launch.h: WidenCopy)
      Launch<uint4>(dst, src, calc, n, s);
      break;
    default:
      return "unsupported element size";
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
