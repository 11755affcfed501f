// core/ops/pointwise_kernels.cc — run-time choice between the AVX2 and AVX-512 pointwise kernels.
//
// Invariant: ActivePointwiseKernels() returns the AVX-512 variant only when ActiveVectorIsa() says so
// (core/ops/vector_isa.h: cpuid, or a test's override), so one binary runs on AVX2-only CPUs.
//
// Example: ActivePointwiseKernels().isa  // "avx512" on a Xeon with AVX-512, "avx2" on an AVX2-only EPYC
#include "core/ops/pointwise_kernels.h"

#include "core/ops/vector_isa.h"

namespace tessel {

const PointwiseKernels& ActivePointwiseKernels() {
  return ActiveVectorIsa() == VectorIsa::kAvx512 ? Avx512PointwiseKernels() : Avx2PointwiseKernels();
}

}  // namespace tessel
