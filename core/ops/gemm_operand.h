// core/ops/gemm_operand.h — internal to core/ops: a tensor's last two dims as the MatRef Gemm reads
// (gemm.h), the dtype Gemm reads a floating dtype's operands in, an operand made readable in place, and
// whether a batch of GEMMs runs in parallel. Shared by matmul.cc and grouped_mm.cc.
//
// Example:
//   const DType od = GemmOperandDType(a.dtype());
//   const Tensor A = GemmOperand(a, od);          // a itself unless converted or copied
//   Gemm(od, MatOf(A), MatOf(B), c, ldc, false);
#pragma once

#include <cstdint>

#include "core/base/parallel.h"
#include "core/ops/gemm.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor.h"

namespace tessel {

// The last two dims of t (from element `offset` of its data) as a strided matrix.
inline MatRef MatOf(const Tensor& t, int64_t offset = 0) {
  const int64_t d = t.dim();
  return MatRef{static_cast<const char*>(t.raw_data()) + offset * ElementSize(t.dtype()), t.size(d - 2), t.size(d - 1),
                t.stride(d - 2), t.stride(d - 1)};
}

// The dtype Gemm reads the operands in: bf16 stays bf16 where the CPU has native bf16 GEMMs; other
// 16-bit floats are widened to float32 (products and sums are float32 either way).
inline DType GemmOperandDType(DType dtype) {
  if (dtype == DType::kFloat64) return DType::kFloat64;
  return dtype == DType::kBFloat16 && Bf16GemmIsNative() ? DType::kBFloat16 : DType::kFloat32;
}

// Whether a batch of `count` GEMMs, the largest of `mnk` multiply-adds, runs one GEMM per thread at a time
// (ParallelFor over the batch; Gemm is single-threaded inside a parallel region) rather than one GEMM after
// another, each threaded by Gemm: small GEMMs (under 128³ multiply-adds), or many of them.
inline bool GemmsInParallel(int64_t count, int64_t mnk) {
  return count > 1 && (mnk <= (int64_t{1} << 21) || count >= 4 * NumThreads());
}

// An operand of dtype `operand` Gemm can read in place: converts 16-bit floats (to float32 unless they
// stay bf16) and copies a matrix with neither of its last two strides equal to 1; anything else passes
// through untouched.
inline Tensor GemmOperand(const Tensor& t, DType operand) {
  if (t.dtype() == operand && GemmCanRead(MatOf(t))) return t;
  Tensor c = Empty(t.sizes(), operand, t.device());
  CopyInto(c, t);
  return c;
}

}  // namespace tessel
