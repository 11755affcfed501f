// core/ops/pointwise_kernels_avx512.cc — the AVX-512F variant of the float32 pointwise kernels (16 floats
// per vector). The only pointwise file built with -mavx512f (core/ops/BUILD.bazel); reached only after
// the cpuid check in vector_isa.cc.
//
// Invariant: see core/ops/pointwise_kernels.inc (internal linkage, no shared inline code).
//
// Example: const PointwiseKernels& k = Avx512PointwiseKernels();
#include <immintrin.h>  // always_inline intrinsics only (Fma)

#include <cstdint>

#include "core/ops/pointwise_kernels.h"

#define TESSEL_PW_W 16
#define TESSEL_PW_NAME "avx512"
#include "core/ops/pointwise_kernels.inc"

namespace tessel {
const PointwiseKernels& Avx512PointwiseKernels() { return kKernels; }
}  // namespace tessel
