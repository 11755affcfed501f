// core/ops/pointwise_kernels_avx2.cc — the AVX2 + FMA variant of the float32 pointwise kernels (8 floats
// per vector; the build's x86-64-v3 baseline flags), the one every x86-64-v3 CPU can run.
//
// Invariant: see core/ops/pointwise_kernels.inc (internal linkage, no shared inline code).
//
// Example: const PointwiseKernels& k = Avx2PointwiseKernels();
#include <immintrin.h>  // always_inline intrinsics only (Fma)

#include <cstdint>

#include "core/ops/pointwise_kernels.h"

#define TESSEL_PW_W 8
#define TESSEL_PW_NAME "avx2"
#include "core/ops/pointwise_kernels.inc"

namespace tessel {
const PointwiseKernels& Avx2PointwiseKernels() { return kKernels; }
}  // namespace tessel
