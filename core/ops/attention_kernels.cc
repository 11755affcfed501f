// core/ops/attention_kernels.cc — run-time choice between the AVX2 and AVX-512 attention head kernels.
//
// Invariant: ActiveAttentionKernels() returns the AVX-512 variant only when ActiveVectorIsa() says so
// (core/ops/vector_isa.h: cpuid, or a test's override), so one binary runs on AVX2-only CPUs.
//
// Example: ActiveAttentionKernels().isa  // "avx512" on a Xeon with AVX-512, "avx2" on an AVX2-only EPYC
#include "core/ops/attention_kernels.h"

#include "core/ops/vector_isa.h"

namespace tessel {

const AttentionKernels& ActiveAttentionKernels() {
  return ActiveVectorIsa() == VectorIsa::kAvx512 ? Avx512AttentionKernels() : Avx2AttentionKernels();
}

}  // namespace tessel
