// core/ops/attention_kernels_avx512.cc — the AVX-512F variant of the float32 attention head kernels
// (16 floats per vector, 12 × 32 register tiles: 24 accumulators of the 32 zmm registers). The only
// file of core/ops built with -mavx512f (core/ops/BUILD.bazel); reached only after
// CpuHasAvx512() (core/ops/vector_isa.h).
//
// Invariant: see core/ops/attention_kernels.inc (internal linkage, no shared inline code).
//
// Example: const AttentionKernels& k = Avx512AttentionKernels();
#include "core/ops/attention_kernels.h"

#include <immintrin.h>  // always_inline intrinsics only: nothing a linker could share with the AVX2 copy

#define TESSEL_ATTN_W 16
#define TESSEL_ATTN_MR 12
#define TESSEL_ATTN_NAME "avx512"
// 2^n scaling in Exp2, with underflow to 0 (the merge form: no undefined source operand).
#define TESSEL_ATTN_SCALEF(p, n) _mm512_mask_scalef_ps((p), static_cast<__mmask16>(-1), (p), (n))
#define TESSEL_ATTN_ROUND(y) _mm512_roundscale_ps((y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define TESSEL_ATTN_REDUCE(y) _mm512_reduce_ps((y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
// Four 128-bit blocks from four addresses as one vector (PackTransposed's loads).
#define TESSEL_ATTN_LOAD_BLOCKS(a, b, c, d)                                                                   \
  _mm512_insertf32x4(                                                                                        \
      _mm512_insertf32x4(_mm512_insertf32x4(_mm512_zextps128_ps512(_mm_loadu_ps(a)), _mm_loadu_ps(b), 1),   \
                         _mm_loadu_ps(c), 2),                                                                \
      _mm_loadu_ps(d), 3)
#include "core/ops/attention_kernels.inc"

namespace tessel {
const AttentionKernels& Avx512AttentionKernels() { return kKernels; }
}  // namespace tessel
