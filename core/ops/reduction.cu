// core/ops/reduction.cu — CUDA kernels of sum / mean over dims (one block per output element, threads over
// its reduced elements read with the input's strides, fp32 tree sum, times scale), of amax and norm
// (p = 1, 2, inf; the same scheme with a NaN-propagating max or a sum of |x| / x², cuda/reduce_plan.h)
// and of sum_backward (the
// gradient broadcast over the reduced dims, times scale; grid-stride over the input shape). float32 and
// bfloat16. The index math is cuda/reduce_plan.h, run on the host by core/ops/cuda/reduce_plan_test.cc
// against the CPU kernels; checks stay in reduction_cuda.cc. Reducing a non-innermost dim reads strided,
// uncoalesced memory, except sums over the rows of a contiguous [rows, cols] layout (bias gradients),
// which take the two-pass column sum (IsColumnSum). Compiled with nvcc 13 for sm_90a + compute_90 PTX;
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cuda_runtime.h>

#include "core/ops/cuda/block_merge.cuh"
#include "core/ops/cuda/reduce_plan.h"
#include "core/ops/cuda/row_kernels_launch.h"

namespace tessel::cuda {
namespace {

template <typename T>
__global__ void SumKernel(const T* x, T* out, ReducePlan p, float scale) {
  __shared__ SumAcc slots[kMaxRowThreads];
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    const SumAcc s = BlockMerge(slots, ReducePartial(x, p, o, threadIdx.x, blockDim.x));
    if (threadIdx.x == 0) StoreF(out, o, s.sum * scale);
  }
}

// First pass of the column sum: block (x, y) sums columns 32x .. 32x + 31 over row chunk y; 8 row lanes
// per column read 32 adjacent values per warp row, then merge in lane order.
template <typename T>
__global__ void ColumnPartialKernel(const T* x, float* partial, int64_t rows, int64_t cols, int64_t chunk_rows) {
  __shared__ float part[8][33];
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float s = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += LoadF(x, r * cols + c);
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += part[k][threadIdx.x];
    partial[blockIdx.y * cols + c] = t;
  }
}

// Second pass: each column's partials in chunk order, times scale.
template <typename T>
__global__ void ColumnFinishKernel(const float* partial, T* out, int64_t chunks, int64_t cols, float scale) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    float t = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) t += partial[k * cols + c];
    StoreF(out, c, t * scale);
  }
}

template <typename T>
void ColumnSum(const void* x, void* out, float* partial, int64_t rows, int64_t cols, int64_t chunks, float scale,
               cudaStream_t s) {
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
  ColumnPartialKernel<T><<<grid, dim3(32, 8), 0, s>>>(static_cast<const T*>(x), partial, rows, cols, chunk_rows);
  ColumnFinishKernel<T><<<LaneBlocks((cols + 255) / 256), 256, 0, s>>>(partial, static_cast<T*>(out), chunks, cols,
                                                                       scale);
}

template <typename Acc, typename T>
__global__ void MappedReduceKernel(const T* x, T* out, ReducePlan p, ReduceKind kind) {
  __shared__ Acc slots[kMaxRowThreads];
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    const Acc r = BlockMerge(slots, ReduceMappedPartial<Acc>(x, p, o, threadIdx.x, blockDim.x, kind));
    if (threadIdx.x == 0) StoreF(out, o, Finish(kind, r));
  }
}

template <typename Acc>
void LaunchMapped(ElemType type, ReduceKind kind, const void* x, void* out, const ReducePlan& plan, cudaStream_t s) {
  const int blocks = LaneBlocks(plan.num_out), threads = BlockThreads(plan.inner_n);
  if (type == ElemType::kFloat32) {
    MappedReduceKernel<Acc, float>
        <<<blocks, threads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(out), plan, kind);
  } else {
    MappedReduceKernel<Acc, uint16_t>
        <<<blocks, threads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(out), plan, kind);
  }
}

template <typename T>
__global__ void ArgMaxKernel(const T* x, T* values, int64_t* indices, ReducePlan p) {
  __shared__ ArgMaxAcc slots[kMaxRowThreads];
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    const ArgMaxAcc r = BlockMerge(slots, ArgMaxPartial(x, p, o, threadIdx.x, blockDim.x));
    if (threadIdx.x == 0) {
      StoreF(values, o, r.value);
      indices[o] = r.index;
    }
  }
}

template <typename T>
__global__ void ArgMaxScatterKernel(const T* g, const int64_t* idx, T* out, OffsetCalculator<3> calc, int64_t n,
                                    int64_t dim_stride) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[3];
    calc.Get(i, off);
    out[off[0] + idx[off[2]] * dim_stride] = g[off[1]];
  }
}

template <typename T>
__global__ void BroadcastScaleKernel(const T* g, T* out, OffsetCalculator<2> calc, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    calc.Get(i, off);
    StoreF(out, off[0], LoadF(g, off[1]) * scale);
  }
}

}  // namespace

const char* LaunchSum(ElemType type, const void* x, void* out, const ReducePlan& plan, float scale, void* stream) {
  if (plan.num_out == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = LaneBlocks(plan.num_out), threads = BlockThreads(plan.inner_n);
  if (type == ElemType::kFloat32) {
    SumKernel<float><<<blocks, threads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(out), plan, scale);
  } else {
    SumKernel<uint16_t>
        <<<blocks, threads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(out), plan, scale);
  }
  return LastLaunchError();
}

const char* LaunchColumnSum(ElemType type, const void* x, void* out, float* partial, int64_t rows, int64_t cols,
                            int64_t chunks, float scale, void* stream) {
  if (cols == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == ElemType::kFloat32) {
    ColumnSum<float>(x, out, partial, rows, cols, chunks, scale, s);
  } else {
    ColumnSum<uint16_t>(x, out, partial, rows, cols, chunks, scale, s);
  }
  return LastLaunchError();
}

const char* LaunchMappedReduce(ElemType type, ReduceKind kind, const void* x, void* out, const ReducePlan& plan,
                               void* stream) {
  if (plan.num_out == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (IsMax(kind)) {
    LaunchMapped<MaxAcc>(type, kind, x, out, plan, s);
  } else {
    LaunchMapped<SumAcc>(type, kind, x, out, plan, s);
  }
  return LastLaunchError();
}

const char* LaunchArgMax(ElemType type, const void* x, void* values, int64_t* indices, const ReducePlan& plan,
                         void* stream) {
  if (plan.num_out == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = LaneBlocks(plan.num_out), threads = BlockThreads(plan.inner_n);
  if (type == ElemType::kFloat32) {
    ArgMaxKernel<float><<<blocks, threads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(values), indices,
                                                   plan);
  } else {
    ArgMaxKernel<uint16_t><<<blocks, threads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(values),
                                                      indices, plan);
  }
  return LastLaunchError();
}

const char* LaunchArgMaxScatter(ElemType type, const void* g, const int64_t* idx, void* out,
                                const OffsetCalculator<3>& calc, int64_t n, int64_t dim_stride, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int kThreads = 256;
  const int blocks = LaneBlocks((n + kThreads - 1) / kThreads);
  if (type == ElemType::kFloat32) {
    ArgMaxScatterKernel<float><<<blocks, kThreads, 0, s>>>(static_cast<const float*>(g), idx, static_cast<float*>(out),
                                                           calc, n, dim_stride);
  } else {
    ArgMaxScatterKernel<uint16_t><<<blocks, kThreads, 0, s>>>(static_cast<const uint16_t*>(g), idx,
                                                              static_cast<uint16_t*>(out), calc, n, dim_stride);
  }
  return LastLaunchError();
}

const char* LaunchBroadcastScale(ElemType type, const void* g, void* out, const OffsetCalculator<2>& calc, int64_t n,
                                 float scale, void* stream) {
  if (n == 0) return "";
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  constexpr int kThreads = 256;
  const int blocks = LaneBlocks((n + kThreads - 1) / kThreads);
  if (type == ElemType::kFloat32) {
    BroadcastScaleKernel<float>
        <<<blocks, kThreads, 0, s>>>(static_cast<const float*>(g), static_cast<float*>(out), calc, n, scale);
  } else {
    BroadcastScaleKernel<uint16_t>
        <<<blocks, kThreads, 0, s>>>(static_cast<const uint16_t*>(g), static_cast<uint16_t*>(out), calc, n, scale);
  }
  return LastLaunchError();
}

}  // namespace tessel::cuda
