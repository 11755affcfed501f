// core/tensor/random_kernels.cc — which copy of the random kernels runs (random_kernels.h).
#include "core/tensor/random_kernels.h"

#include "core/ops/vector_isa.h"

namespace tessel {

const RandomKernels& ActiveRandomKernels() {
  return ActiveVectorIsa() == VectorIsa::kAvx512 ? Avx512RandomKernels() : Avx2RandomKernels();
}

}  // namespace tessel
