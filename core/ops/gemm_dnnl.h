// core/ops/gemm_dnnl.h — internal to core/ops/gemm.cc: bf16 × bf16 → fp32 GEMMs on oneDNN's matmul
// primitive (Debian's libdnnl 2.6, whose JIT picks AMX or AVX512-BF16 kernels at run time), and fp32
// GEMMs on oneDNN's dnnl_sgemm.
//
// Defines DnnlIsa (the ISA oneDNN dispatches to here), DnnlHasFastBf16 (worth using over converting to
// fp32 and calling OpenBLAS's sgemm), DnnlBf16Gemm (one single-threaded product), DnnlBf16Impl (the
// kernels oneDNN chose for the cached shapes, e.g. "brg:avx512_core_amx_bf16 ×12") and DnnlSgemm (one
// single-threaded fp32 product).
//
// Invariant: DnnlBf16Gemm and DnnlSgemm run on the calling thread only (its OpenMP team is 1 thread
// while they run), so gemm.cc's own panel split over tessel's thread budget stays the only
// parallelism. bf16 primitives are created once per (shape, layout, accumulate) key and shared by every
// thread; each call passes its own scratchpad, so concurrent callers never share buffers. The sum over
// K accumulates in fp32.
//
// Example (a row-major [m, k], b = w^T for a row-major bf16 w [n, k], c row-major fp32 [m, n]):
//   if (DnnlHasFastBf16())
//     ok = DnnlBf16Gemm(MatRef{pa, m, k, k, 1}, MatRef{pw, k, n, 1, k}, pc, n, /*accumulate=*/false);
#pragma once

#include <cstdint>
#include <string>

#include "core/ops/gemm.h"

namespace tessel {

// oneDNN's effective ISA on this CPU, e.g. "avx512_core_amx", "avx2".
std::string DnnlIsa();

// True when oneDNN's bf16 kernels beat converting to fp32 for sgemm: the effective ISA has AMX-BF16
// tiles, or it has AVX512-BF16 on an AMD CPU. Measured on an Intel Xeon with AMX (1 thread, 2048³):
// AMX bf16 650–740 GFLOP/s against OpenBLAS sgemm's ~175; with the ISA capped at AVX512_CORE_BF16 (no
// AMX) oneDNN ran 108 and at AVX512_CORE (bf16 emulated) 29, both slower than converting to fp32. On an AMD EPYC
// (Zen 4, family 25 model 17, 1 thread) the AVX512-BF16 brgemm ran 167–193 GFLOP/s against oneDNN
// sgemm's 71–98 on the same shapes (2048³ and the GPT step's [2048, 256..1024] products), so AMD's
// AVX512-BF16 counts as fast. A vendor check, not a timing: the path must not depend on machine load.
bool DnnlHasFastBf16();

// c [a.rows, b.cols] (row-major fp32, leading dimension ldc) = a · b, or += when accumulate; a and b
// hold bf16 and are row- or column-major (GemmCanRead). Returns false, having written nothing, when
// oneDNN has no kernel for this case (the caller then takes the fp32 path).
bool DnnlBf16Gemm(const MatRef& a, const MatRef& b, float* c, int64_t ldc, bool accumulate);

// c [m, n] (row-major fp32, leading dimension ldc) = op(a) · op(b), or += when accumulate, on oneDNN's
// fp32 GEMM (dnnl_sgemm) on the calling thread only. a and b are row-major as cblas_sgemm(CblasRowMajor)
// sees them: op(x) = x, or its transpose when trans_x; lda/ldb their leading dimensions.
void DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

// The implementations oneDNN chose for the cached primitives with their shape counts, e.g.
// "brg:avx512_core_amx_bf16 ×12" ("" before the first product).
std::string DnnlBf16Impl();

// Test-only: empties the primitive cache (so DnnlBf16Impl then describes only later products).
void DnnlBf16ClearCacheForTesting();

}  // namespace tessel
