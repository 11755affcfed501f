// core/ops/attention_kernels_avx2.cc — the AVX2 + FMA variant of the float32 attention head kernels
// (8 floats per vector, 6 × 16 register tiles: 12 accumulators of the 16 ymm registers). Built with
// the project's x86-64-v3 baseline plus -ffp-contract=fast (core/ops/BUILD.bazel).
//
// Invariant: see core/ops/attention_kernels.inc (internal linkage, no shared inline code).
//
// Example: const AttentionKernels& k = Avx2AttentionKernels();
#include "core/ops/attention_kernels.h"

#define TESSEL_ATTN_W 8
#define TESSEL_ATTN_MR 6
#define TESSEL_ATTN_NAME "avx2"
#include "core/ops/attention_kernels.inc"

namespace tessel {
const AttentionKernels& Avx2AttentionKernels() { return kKernels; }
}  // namespace tessel
