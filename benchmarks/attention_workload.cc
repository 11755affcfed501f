// benchmarks/attention_workload.cc — the `attention_vs_gemm_flops` headline figure: the fused causal
// attention's forward + backward (core/ops/attention.cc, through autograd) in useful GFLOP/s against
// the machine's GEMM peak measured in the same run (the BLAS behind core/ops/gemm.h, 2048³ float32).
//
// Shape: the reference GPT step's attention, q/k/v [16·8 heads, 128, 32] float32, causal. Useful flops
// count only unmasked (query, key) pairs, P = T(T+1)/2 per head, and the six products of the textbook
// algorithm, each 2·P·D flops (D = Dv): forward q·kᵀ and P·v, backward dV, dP, dQ and dK. The
// backward's recomputation of q·kᵀ is not counted.
// The note lines repeat the measurement at the figure's shape with D = 64 ([128, 128, 64]) and for a
// longer sequence (T = 1024, D = 64, 8 heads): the products grow with D while the per-score softmax
// work (the exponentials, forward and backward) and the masked diagonal tiles do not, so these show
// what the D = 32 figure loses to them. A last note line measures the figure on one thread against
// one thread's sgemm: the kernels' own rate, without what two vCPUs of a shared VM lose to each other
// (one slowed by the host while the other waits for it; docs/PERFORMANCE.md, fifteenth session), which
// moves the 2-thread figure by 10-20% from run to run. The last repeats the figure on the AVX2 path (figure.h's
// Avx2ChildLine): what an AVX2-only CPU's kernels reach against its sgemm, measured on any machine.
//
// One timed run is kCallsPerRun back-to-back forward + backward calls (~10 ms at the figure's shape on 2
// threads): a single 2.4 ms call timed right after the baseline's 2048³ sgemm (48 MB of operands) measures
// mostly refetching its own 20 MB of inputs, outputs and gradients after that sgemm evicted them (0.37
// instead of 0.47 on the 2-vCPU Xeon of docs/PERFORMANCE.md), while a training step runs attention right
// after the QKV projection that wrote its inputs. The sgemm side is one call of ~47 ms.
//
// Invariant: both sides run on the calling thread's NumThreads() budget (target >= 0.6, issue 16).
//
// Example:
//   bazel run //benchmarks:report -- --filter=attention
#include <cstdio>
#include <string>

#include "benchmarks/figure.h"
#include "benchmarks/gemm_peak_workload.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/attention.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::bench {
namespace {

constexpr int kCallsPerRun = 4;

struct AttentionShape {
  int64_t batch_heads, t, d;
  double Gflop() const {  // per timed run
    const double pairs = static_cast<double>(t) * static_cast<double>(t + 1) / 2.0;
    return kCallsPerRun * static_cast<double>(batch_heads) * 6.0 * 2.0 * pairs * static_cast<double>(d) / 1e9;
  }
};

std::function<void()> MakeFusedAttentionFwdBwd(const AttentionShape& s) {
  Generator gen(3);
  auto make = [&] {
    Tensor t = Randn({s.batch_heads, s.t, s.d}, gen);
    t.set_requires_grad(true);
    return t;
  };
  Tensor q = make(), k = make(), v = make();
  Tensor g = Randn({s.batch_heads, s.t, s.d}, gen);
  return [q, k, v, g] {
    for (int call = 0; call < kCallsPerRun; ++call) {
      for (Tensor t : {q, k, v}) t.set_grad(Tensor());
      Backward(ScaledDotProductAttention(q, k, v, /*is_causal=*/true), g);
    }
  };
}

const bool kRegistered = RegisterFigure("attention_vs_gemm_flops", [] {
  const AttentionShape s{16 * 8, 128, 32};
  constexpr int64_t kPeakN = 2048;
  Figure f{"attention_vs_gemm_flops",
           {"fused_causal_attention_fwd_bwd", "GFLOP/s", s.Gflop(), MakeFusedAttentionFwdBwd(s)},
           Throughput{"blas_sgemm_2048", "GFLOP/s", SquareGemmGflop(kPeakN), MakeBlasSquareSgemm(kPeakN)}};
  f.baseline_is_peak = true;
  f.note = [s, kPeakN] {
    if (InAvx2ChildReport()) return std::string("the AVX2 kernels");
    const AttentionShape wide{16 * 8, 128, 64}, long_seq{8, 1024, 64};
    const double wide_rate = MeasureThroughput({"wide", "GFLOP/s", wide.Gflop(), MakeFusedAttentionFwdBwd(wide)}, 1, 5);
    const double long_rate = MeasureThroughput({"long", "GFLOP/s", long_seq.Gflop(), MakeFusedAttentionFwdBwd(long_seq)}, 1, 5);
    FigureResult one;
    {
      const NumThreadsGuard one_thread(1);
      Figure f1{"one_thread", {"attention", "GFLOP/s", s.Gflop(), MakeFusedAttentionFwdBwd(s)},
                Throughput{"sgemm", "GFLOP/s", SquareGemmGflop(kPeakN), MakeBlasSquareSgemm(kPeakN)}};
      f1.baseline_is_peak = true;
      one = Measure(f1, 1, 3);
    }
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.3f", one.value / one.baseline);
    return Str("fused causal attention fwd+bwd at [128, 128, 64]: ", static_cast<int64_t>(wide_rate),
               " GFLOP/s\n# fused causal attention fwd+bwd at [8, 1024, 64]: ", static_cast<int64_t>(long_rate),
               " GFLOP/s\n# one thread: fused causal attention ", static_cast<int64_t>(one.value),
               " GFLOP/s vs sgemm ", static_cast<int64_t>(one.baseline), " GFLOP/s ratio ", ratio,
               "\n# AVX2 kernels, oneDNN capped at AVX2: ", Avx2ChildLine("attention_vs_gemm_flops"));
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
