// core/ops/pointwise_kernels.cc — run-time choice between the AVX2 and AVX-512 pointwise kernels.
//
// Invariant: ActivePointwiseKernels() returns the AVX-512 variant only when cpuid reports AVX-512F and
// the OS saves the zmm state (CpuHasAvx512, attention_kernels.h), so one binary runs on AVX2-only CPUs.
//
// Example: ActivePointwiseKernels().isa  // "avx512" on a Xeon with AVX-512, "avx2" on an AVX2-only EPYC
#include "core/ops/pointwise_kernels.h"

#include <atomic>

#include "core/base/error.h"
#include "core/ops/attention_kernels.h"

namespace tessel {
namespace {

// Test-only override (ForcePointwiseIsaForTesting); kAuto in every production run.
std::atomic<PointwiseIsa> forced_isa{PointwiseIsa::kAuto};

}  // namespace

void ForcePointwiseIsaForTesting(PointwiseIsa isa) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, isa != PointwiseIsa::kAvx512 || CpuHasAvx512(),
                    "ForcePointwiseIsaForTesting: this CPU has no AVX-512F");
  forced_isa.store(isa);
}

const PointwiseKernels& ActivePointwiseKernels() {
  switch (forced_isa.load(std::memory_order_relaxed)) {
    case PointwiseIsa::kAvx2:
      return Avx2PointwiseKernels();
    case PointwiseIsa::kAvx512:
      return Avx512PointwiseKernels();
    case PointwiseIsa::kAuto:
      break;
  }
  return CpuHasAvx512() ? Avx512PointwiseKernels() : Avx2PointwiseKernels();
}

}  // namespace tessel
