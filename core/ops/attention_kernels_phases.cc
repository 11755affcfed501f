// core/ops/attention_kernels_phases.cc — a timing harness (not a test, not part of the library): the
// AVX-512 (or, built as attention_kernels_phases_avx2, the AVX2) float32 attention head kernels of
// attention_kernels.inc, compiled here with the TESSEL_ATTN_PHASE hook defined, timed phase by phase
// (packing, each product, the softmax work) on one thread over H heads of [T, D] (defaults: 64 heads,
// T 128, D 32, causal; half the benchmark figure's attention_vs_gemm_flops heads, what one of its two
// threads runs). Each phase's time is its minimum over the timed iterations (a machine shared with other
// work preempts some of them); products print their useful GFLOP/s (unmasked pairs only, as the figure
// counts them). Arguments: heads, T, D, iterations, prefetch (1: each head names the next, as the library
// does; 0: none; 2: alternate per iteration and print both bests and medians, an A/B on a machine whose
// speed drifts with the other work on it), interleave (8: the heads as a [B, T, 8, D] tensor's [B, 8, T, D]
// view, a transformer block's layout, rows 8·D apart; default 1, each head contiguous).
//
// Invariant: measures the very code the library runs (the same .inc and copts), only with the hook, on
// operands laid out in memory as the library's allocator lays out tensors (huge pages from 2 MiB).
//
// Example:
//   bazel run //core/ops:attention_kernels_phases -- 64 128 32
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/ops/attention_kernels.h"
#include "core/ops/attention_kernels_harness.h"
#include "core/ops/vector_isa.h"

#include "core/ops/attention_kernels.inc"

namespace {

#ifdef TESSEL_HARNESS_AVX2
constexpr bool kAvx2Variant = true;
#else
constexpr bool kAvx2Variant = false;
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace tessel;
#ifdef TESSEL_HARNESS_AVX2
  std::printf("avx2 kernels (W 8, MR 6)\n");
#else
  std::printf("avx512 kernels (W 16, MR 12)\n");
#endif
  if (!kAvx2Variant && !CpuHasAvx512()) {
    std::printf("skipped: this CPU has no AVX-512F with VL, DQ and BW\n");
    return 0;
  }
  const int64_t heads = argc > 1 ? std::atoi(argv[1]) : 64, t = argc > 2 ? std::atoi(argv[2]) : 128;
  const int64_t d = argc > 3 ? std::atoi(argv[3]) : 32, iters = argc > 4 ? std::atoi(argv[4]) : 40;
  // 1: AttentionHeadPtrs::next set (the library's way), 0: not, 2: alternate per iteration (an A/B
  // comparison on a machine whose speed drifts with other work; prints both bests).
  const int prefetch_mode = argc > 5 ? std::atoi(argv[5]) : 1;
  HarnessHeads x(heads, t, d, ScratchFloats(AttentionHeadDims{t, t, d, d}));
  x.interleave = argc > 6 ? std::atoi(argv[6]) : 1;  // 8: heads as a [B, T, 8, D] tensor's view
  double best_total = 1e300, best[16], best_by_mode[2] = {1e300, 1e300};
  std::vector<double> by_mode[2];
  std::fill(best, best + 16, 1e300);
  const auto wall0 = std::chrono::steady_clock::now();
  const uint64_t tsc0 = Now();
  for (int64_t it = 0; it < iters; ++it) {
    std::fill(phase_ticks, phase_ticks + 16, 0);
    const bool prefetch = prefetch_mode == 2 ? it % 2 == 1 : prefetch_mode == 1;
    const uint64_t start = Now();
    x.RunFwdBwd(Forward, Backward, prefetch);
    best_total = std::min(best_total, static_cast<double>(Now() - start));
    best_by_mode[prefetch] = std::min(best_by_mode[prefetch], static_cast<double>(Now() - start));
    by_mode[prefetch].push_back(static_cast<double>(Now() - start));
    for (int i = 0; i < 16; ++i) best[i] = std::min(best[i], static_cast<double>(phase_ticks[i]));
  }
  const double hz = (Now() - tsc0) / std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double pairs = static_cast<double>(heads) * t * (t + 1) / 2;
  const double total_s = best_total / hz;
  std::printf("%lld heads [%lld, %lld] causal, 1 thread: best fwd+bwd %.3f ms, %.1f useful GFLOP/s\n",
              static_cast<long long>(heads), static_cast<long long>(t), static_cast<long long>(d), total_s * 1e3,
              12 * pairs * d / total_s / 1e9);
  if (prefetch_mode == 2) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("  A/B: best with next-head prefetch %.3f ms, without %.3f ms; median %.3f, %.3f ms\n",
                best_by_mode[1] / hz * 1e3, best_by_mode[0] / hz * 1e3, median(by_mode[1]) / hz * 1e3,
                median(by_mode[0]) / hz * 1e3);
  }
  for (int i = 0; i < 16; ++i) {
    if (kPhaseNames[i] == nullptr) continue;
    const double s = best[i] / hz;
    std::printf("  %-16s %7.3f ms %5.1f%%", kPhaseNames[i], s * 1e3, 100 * s / total_s);
    if (kIsProduct[i]) std::printf("  %6.1f useful GFLOP/s", 2 * pairs * d / s / 1e9);
    std::printf("\n");
  }
  return 0;
}
