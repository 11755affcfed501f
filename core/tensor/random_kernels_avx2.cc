// core/tensor/random_kernels_avx2.cc — the AVX2 copy of the random kernels (random_kernels.h): 4 doubles,
// 8 Philox counters per register; the build's x86-64-v3 baseline, so every CPU tessel runs on has it.
#include "core/tensor/random_kernels.h"

#include <immintrin.h>  // always_inline intrinsics only

#define TESSEL_RNG_W 4
#define TESSEL_RNG_NAME "avx2"
#include "core/tensor/random_kernels.inc"

namespace tessel {
const RandomKernels& Avx2RandomKernels() { return kKernels; }
}  // namespace tessel
