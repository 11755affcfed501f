// core/ops/vector_isa.cc — the cpuid check and the test override behind ActiveVectorIsa().
//
// Invariant: see vector_isa.h (kAvx512 only with AVX-512 F, VL, DQ and BW).
//
// Example: ActiveVectorIsa() == VectorIsa::kAvx512  // a Xeon with AVX-512; kAvx2 on an AVX2-only EPYC
#include "core/ops/vector_isa.h"

#include <atomic>

#include "core/base/error.h"

namespace tessel {
namespace {

// Test-only override (ForceVectorIsaForTesting); kAuto in every production run.
std::atomic<VectorIsa> forced_isa{VectorIsa::kAuto};

}  // namespace

bool CpuHasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    // Every extension a *_avx512 kernel library is compiled with (core/ops/BUILD.bazel).
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  }();
  return has;
}

void ForceVectorIsaForTesting(VectorIsa isa) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, isa != VectorIsa::kAvx512 || CpuHasAvx512(),
                    "ForceVectorIsaForTesting: this CPU has no AVX-512F (with VL, DQ and BW)");
  forced_isa.store(isa);
}

VectorIsa ActiveVectorIsa() {
  const VectorIsa forced = forced_isa.load(std::memory_order_relaxed);
  if (forced != VectorIsa::kAuto) return forced;
  return CpuHasAvx512() ? VectorIsa::kAvx512 : VectorIsa::kAvx2;
}

}  // namespace tessel
