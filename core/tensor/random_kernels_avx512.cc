// core/tensor/random_kernels_avx512.cc — the AVX-512F copy of the random kernels (random_kernels.h): 8
// doubles, 16 Philox counters per register. Reached only after CpuHasAvx512() (core/ops/vector_isa.h).
#include "core/tensor/random_kernels.h"

#include <immintrin.h>  // always_inline intrinsics only

#define TESSEL_RNG_W 8
#define TESSEL_RNG_NAME "avx512"
#include "core/tensor/random_kernels.inc"

namespace tessel {
const RandomKernels& Avx512RandomKernels() { return kKernels; }
}  // namespace tessel
