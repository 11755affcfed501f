// core/ops/gemm_operand.h — internal to core/ops: a tensor's last two dims as the MatRef Gemm reads
// (gemm.h), the dtype Gemm reads a floating dtype's operands in, and an operand made readable in place.
// Shared by matmul.cc and grouped_mm.cc.
//
// Example:
//   const DType od = GemmOperandDType(a.dtype());
//   const Tensor A = GemmOperand(a, od);          // a itself unless converted or copied
//   Gemm(od, MatOf(A), MatOf(B), c, ldc, false);
#pragma once

#include <cstdint>

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
