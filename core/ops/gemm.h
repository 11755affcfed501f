// core/ops/gemm.h — internal to core/ops: one strided GEMM, C (+)= A · B, on oneDNN's sgemm for float32,
// OpenBLAS for float64 (both with runtime CPU dispatch) and oneDNN (AMX) for bfloat16 (gemm.cc says why
// those libraries and how they are threaded).
//
// Defines MatRef (a strided 2-D matrix over raw memory), GemmCanRead (can the BLAS read it without a
// copy), GemmEpilogue (work run on each output panel as soon as it is computed), Gemm (float32/float64,
// and bfloat16 operands into a float32 product), GemmBackend and
// Bf16GemmBackend (which kernels run on this CPU), Bf16GemmIsNative and test-only switches that force
// the bf16 fallback and float32 onto OpenBLAS. The libraries' headers stay inside gemm.cc / gemm_dnnl.cc.
//
// Invariant: Gemm reads both operands in place — a row-major or a column-major matrix with any leading
// dimension, which covers a transposed view of a contiguous weight — and never copies them; callers
// copy only matrices for which GemmCanRead is false (neither of the last two strides is 1). It uses at
// most NumThreads() threads of the calling thread (core/base/parallel.h), and runs single-threaded
// inside a parallel region (a kernel that parallelizes over a batch of small GEMMs). Each output
// element's sum over K runs in an order fixed by the shapes and the thread budget, so repeated runs
// with the same budget agree bit for bit (a GEMM whose K is at least twice its other dims is summed in
// per-thread slices, so other budgets round differently there). An epilogue sees
// each output element exactly once, after its sum is final.
//
// Example (c is row-major [M, N]):
//   MatRef a{pa, M, K, /*row_stride=*/K, /*col_stride=*/1};
//   MatRef bt{pw, K, N, /*row_stride=*/1, /*col_stride=*/K};       // w^T for a contiguous w [N, K]
//   Gemm(DType::kFloat32, a, bt, pc, /*ldc=*/N, /*accumulate=*/false);  // c = a @ w^T
#pragma once

#include <cstdint>
#include <functional>
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

// [Note: GEMM epilogue] Work on the product that should run while it is still in cache (linear's bias,
// linear_gelu's activation): Gemm calls it once per output panel [row_begin, row_end) × [col_begin,
// col_end) of c, right after that panel's product, on the thread that computed it. The panels partition
// c, so each element is seen once; calls for different panels may run concurrently. Paths that do not
// split c (one thread, an empty contraction, the bf16 → fp32 fallback) make one call for all of c; a
// GEMM split along K (gemm.cc, NOTE: K split) calls it per row range once that range's partial
// products are summed, on the thread that summed them.
using GemmEpilogue = std::function<void(int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end)>;

// c (row-major, leading dimension ldc) = a · b, or c += a · b when accumulate; then `epilogue` (if set)
// on every panel of c.
// dtype float32 or float64: a, b and c hold that type. dtype bfloat16: a and b hold bf16 and c is
// float32; products are exact in fp32 and summed in fp32 (oneDNN when Bf16GemmIsNative(), else the
// operands are widened to fp32 and go through the float32 path).
// REQUIRES: GemmCanRead(a) && GemmCanRead(b); a.cols == b.rows.
void Gemm(DType dtype, const MatRef& a, const MatRef& b, void* c, int64_t ldc, bool accumulate,
          const GemmEpilogue& epilogue = nullptr);

// The GEMM libraries and the kernels they chose for this CPU, e.g. "float32: oneDNN sgemm (ISA
// avx512_core_amx, 1 thread per call); float64: OpenBLAS (SkylakeX kernels, 1 BLAS thread per call)".
std::string GemmBackend();

// Test-only: while true, float32 GEMMs run on OpenBLAS's sgemm instead of oneDNN's (so tests compare both).
void SetFloat32GemmOnOpenBlasForTesting(bool force);

// True when bf16 GEMMs run on native bf16 kernels (oneDNN with AMX-BF16 on this CPU) and the test-only
// fallback switch is off. Callers holding bf16 tensors pass them to Gemm as they are when this holds,
// and widen them to float32 themselves otherwise (cheaper than a widening per Gemm call).
bool Bf16GemmIsNative();

// How bf16 GEMMs run here, e.g. "oneDNN (ISA avx512_core_amx, kernels brg:avx512_core_amx_bf16 ×12)"
// or "fp32 fallback (oneDNN ISA avx2 has no AMX-BF16)".
std::string Bf16GemmBackend();

// Test-only: while true, bf16 GEMMs take the fp32 fallback on any CPU (so tests cover both paths).
void SetBf16GemmFallbackForTesting(bool force);

}  // namespace tessel
