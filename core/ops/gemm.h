// core/ops/gemm.h — internal to core/ops: one strided GEMM, C (+)= A · B, on OpenBLAS with runtime CPU
// dispatch (gemm.cc says why that BLAS and how it is threaded).
//
// Defines MatRef (a strided 2-D matrix over raw memory), GemmCanRead (can the BLAS read it without a
// copy), Gemm (float32/float64) and GemmBackend (which kernels run on this CPU). The BLAS header stays
// inside gemm.cc.
//
// Invariant: Gemm reads both operands in place — a row-major or a column-major matrix with any leading
// dimension, which covers a transposed view of a contiguous weight — and never copies them; callers
// copy only matrices for which GemmCanRead is false (neither of the last two strides is 1). It uses at
// most NumThreads() threads of the calling thread (core/base/parallel.h), and runs single-threaded
// inside a parallel region (a kernel that parallelizes over a batch of small GEMMs). Each output
// element's sum over K runs in one fixed order, so repeated runs agree bit for bit.
//
// Example (c is row-major [M, N]):
//   MatRef a{pa, M, K, /*row_stride=*/K, /*col_stride=*/1};
//   MatRef bt{pw, K, N, /*row_stride=*/1, /*col_stride=*/K};       // w^T for a contiguous w [N, K]
//   Gemm(DType::kFloat32, a, bt, pc, /*ldc=*/N, /*accumulate=*/false);  // c = a @ w^T
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor/dtype.h"

namespace tessel {

// A rows × cols matrix: element (i, j) is at data + i * row_stride + j * col_stride (in elements).
struct MatRef {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

// True when the matrix is row-major (col_stride 1) or column-major (row_stride 1) with a leading
// dimension that does not overlap rows/columns; size-1 dims accept any stride.
bool GemmCanRead(const MatRef& m);

// c (row-major, leading dimension ldc) = a · b, or c += a · b when accumulate.
// REQUIRES: dtype float32 or float64; GemmCanRead(a) && GemmCanRead(b); a.cols == b.rows.
void Gemm(DType dtype, const MatRef& a, const MatRef& b, void* c, int64_t ldc, bool accumulate);

// The GEMM library and the kernels it chose for this CPU, e.g. "OpenBLAS (SkylakeX kernels, 1 BLAS thread per call)".
std::string GemmBackend();

}  // namespace tessel
