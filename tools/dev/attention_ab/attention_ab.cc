// tools/dev/attention_ab/attention_ab.cc — developer tool (not a test, not part of the library): an A/B
// comparison of two versions of the float32 AVX-512 attention head kernels (core/ops/attention_kernels.inc)
// compiled into one process and run on alternate iterations over the same inputs, scratch and pages, so
// that a 2% change is measurable on a shared VM whose speed drifts by 10-15% between runs (timing two
// binaries one after the other could not tell a 2% gain from their code layout). Prints both versions'
// best and median fwd+bwd time, the largest gradient difference between them (0 for a change that only
// reorders no arithmetic) and the per-phase best times of the TESSEL_ATTN_PHASE marks.
//
// Built and run by attention_ab.sh, which compiles VARIANT_A (a git revision's kernels) and VARIANT_B
// (the working tree's) with the flags of core/ops/BUILD.bazel's AVX-512 kernels, or of the AVX2 ones with
// -DTESSEL_HARNESS_AVX2 (on a CPU without AVX-512, or ISA=avx2).
//
// Invariant: both variants see the same heads, scratch buffer and iteration count; only the code differs.
// The operands sit in memory as core/memory/allocator.cc gives tensors (HarnessHeads in
// core/ops/attention_kernels_harness.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/ops/attention_kernels.h"
#include "core/ops/attention_kernels_harness.h"

// Each variant's copy of `namespace tessel { namespace { ... } }` lives inside its own outer namespace.
namespace variant_a {
namespace tessel {
using ::tessel::AttentionHeadDims;
using ::tessel::AttentionHeadPtrs;
using ::tessel::AttentionKernels;
}  // namespace tessel
#include VARIANT_A
const ::tessel::AttentionKernels& Kernels() { return tessel::kKernels; }
}  // namespace variant_a
namespace variant_b {
namespace tessel {
using ::tessel::AttentionHeadDims;
using ::tessel::AttentionHeadPtrs;
using ::tessel::AttentionKernels;
}  // namespace tessel
#include VARIANT_B
const ::tessel::AttentionKernels& Kernels() { return tessel::kKernels; }
}  // namespace variant_b

int main(int argc, char** argv) {
  using ::tessel::AttentionHeadDims;
  using ::tessel::AttentionKernels;
  const int64_t heads = argc > 1 ? std::atoi(argv[1]) : 128, t = argc > 2 ? std::atoi(argv[2]) : 128;
  const int64_t d = argc > 3 ? std::atoi(argv[3]) : 32, iters = argc > 4 ? std::atoi(argv[4]) : 200;
  const AttentionKernels* kernels[2] = {&variant_a::Kernels(), &variant_b::Kernels()};
  const AttentionHeadDims dm{t, t, d, d};
  HarnessHeads x(heads, t, d, std::max(kernels[0]->scratch_floats(dm), kernels[1]->scratch_floats(dm)));
  x.interleave = argc > 5 ? std::atoi(argv[5]) : 1;  // 8: the GPT block's [B, T, 8, D] memory
  std::vector<float> grads[2];
  std::vector<double> totals[2], phases[2][16];
  for (int64_t it = 0; it < iters; ++it) {
    const int w = static_cast<int>(it % 2);
    std::fill(phase_ticks, phase_ticks + 16, 0);
    const uint64_t start = Now();
    x.RunFwdBwd(kernels[w]->forward, kernels[w]->backward, /*prefetch=*/true);
    totals[w].push_back(static_cast<double>(Now() - start));
    for (int i = 0; i < 16; ++i) phases[w][i].push_back(static_cast<double>(phase_ticks[i]));
    if (it < 2) {
      grads[w].assign(x.dq.begin(), x.dq.end());
      grads[w].insert(grads[w].end(), x.dk.begin(), x.dk.end());
      grads[w].insert(grads[w].end(), x.dv.begin(), x.dv.end());
    }
  }
  double diff = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) diff = std::max(diff, double{std::fabs(grads[0][i] - grads[1][i])});
  auto best = [](const std::vector<double>& x) { return *std::min_element(x.begin(), x.end()); };
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  // TSC ticks per millisecond, from the TSC's advance over a timed sleep-free spin of ~50 ms.
  const auto wall0 = std::chrono::steady_clock::now();
  const uint64_t tsc0 = Now();
  while (std::chrono::steady_clock::now() - wall0 < std::chrono::milliseconds(50)) {
  }
  const double per_ms = static_cast<double>(Now() - tsc0) /
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  std::printf("%lld heads [%lld, %lld] causal, 1 thread, %lld iterations alternating A (baseline) / B\n",
              static_cast<long long>(heads), static_cast<long long>(t), static_cast<long long>(d),
              static_cast<long long>(iters));
  std::printf("max |grad A - grad B| = %g\n", diff);
  std::printf("fwd+bwd best   A %.3f ms  B %.3f ms  B/A %.3f\n", best(totals[0]) / per_ms, best(totals[1]) / per_ms,
              best(totals[1]) / best(totals[0]));
  std::printf("fwd+bwd median A %.3f ms  B %.3f ms  B/A %.3f\n", median(totals[0]) / per_ms,
              median(totals[1]) / per_ms, median(totals[1]) / median(totals[0]));
  std::printf("phase (best ms)       A       B\n");
  for (int i = 0; i < 16 && kPhaseNames[i] != nullptr; ++i) {
    std::printf("  %-16s %7.3f %7.3f\n", kPhaseNames[i], best(phases[0][i]) / per_ms, best(phases[1][i]) / per_ms);
  }
  return 0;
}
