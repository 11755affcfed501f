// comm/reduce.h — the element-wise reduction kernels behind all_reduce / reduce_scatter on CPU.
//
// Invariant: every element is reduced over the inputs in input order (rank 0 first) in the compute
// type (fp32 for bf16/fp16, the type itself otherwise) and rounded once to the storage type, so all
// ranks that reduce the same inputs get bit-identical results. kAvg sums and divides by the number of
// inputs before rounding. bool reduces as logical or (sum, max) / and (product, min). Max and min
// propagate NaN. `out` may alias one input exactly (in-place all_reduce).
//
// Example:
//   const void* ins[] = {a_ptr, b_ptr};
//   ParallelReduce(DType::kBFloat16, ReduceOp::kSum, out_ptr, ins, n);   // out = bf16(float(a) + float(b))
#pragma once

#include <cstdint>
#include <span>

#include "comm/process_group.h"
#include "core/tensor/dtype.h"

namespace tessel::comm {

// Elements [begin, end) of every input (pointers to element 0) into `out` (pointer to element 0).
void ReduceRange(DType dtype, ReduceOp op, void* out, std::span<const void* const> inputs, int64_t begin,
                 int64_t end);
// All `n` elements, split over the calling thread's NumThreads() budget.
void ParallelReduce(DType dtype, ReduceOp op, void* out, std::span<const void* const> inputs, int64_t n);
// data[i] /= divisor in the compute type (the gloo backend's avg = sum then divide).
void DivideInPlace(DType dtype, void* data, int64_t n, int64_t divisor);
// bf16/fp16 <-> fp32 staging for backends whose wire format is fp32 (REQUIRES: 16-bit float dtype).
void ToFloat32(DType dtype, const void* src, float* dst, int64_t n);
void FromFloat32(DType dtype, const float* src, void* dst, int64_t n);
// memcpy of `nbytes`, split over the calling thread's NumThreads() budget.
void ParallelCopy(void* dst, const void* src, int64_t nbytes);

}  // namespace tessel::comm
