// core/ops/attention_kernels.cc — run-time choice between the AVX2 and AVX-512 attention head kernels.
//
// Invariant: ActiveAttentionKernels() returns the AVX-512 variant only when cpuid reports AVX-512F, VL,
// DQ and BW (the flags that variant is compiled with) and the OS saves the zmm state
// (__builtin_cpu_supports checks both), so one binary runs on AVX2-only CPUs.
//
// Example: ActiveAttentionKernels().isa  // "avx512" on a Xeon with AVX-512, "avx2" on an AVX2-only EPYC
#include "core/ops/attention_kernels.h"

#include <atomic>

#include "core/base/error.h"

namespace tessel {
namespace {

// Test-only override (ForceAttentionIsaForTesting); kAuto in every production run.
std::atomic<AttentionIsa> forced_isa{AttentionIsa::kAuto};

}  // namespace

bool CpuHasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    // Every extension attention_kernels_avx512 is compiled with (core/ops/BUILD.bazel).
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  }();
  return has;
}

void ForceAttentionIsaForTesting(AttentionIsa isa) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, isa != AttentionIsa::kAvx512 || CpuHasAvx512(),
                    "ForceAttentionIsaForTesting: this CPU has no AVX-512F (with VL, DQ and BW)");
  forced_isa.store(isa);
}

const AttentionKernels& ActiveAttentionKernels() {
  switch (forced_isa.load(std::memory_order_relaxed)) {
    case AttentionIsa::kAvx2:
      return Avx2AttentionKernels();
    case AttentionIsa::kAvx512:
      return Avx512AttentionKernels();
    case AttentionIsa::kAuto:
      break;
  }
  return CpuHasAvx512() ? Avx512AttentionKernels() : Avx2AttentionKernels();
}

}  // namespace tessel
