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

#include "core/ops/attention_kernels_avx512_isa.inc"
#include "core/ops/attention_kernels.inc"

namespace tessel {
const AttentionKernels& Avx512AttentionKernels() { return kKernels; }
}  // namespace tessel
