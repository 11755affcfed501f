// benchmarks/gemm_peak_workload.cc — the `gemm_vs_peak` headline figure: tessel's Linear forward +
// backward (x [4096, 1024], w [4096, 1024], float32; linear_workload.h) in GFLOP/s against the machine's
// GEMM peak measured in the same run: the BLAS behind core/ops/gemm.h on a 2048³ float32 product, with
// the same threads. The note line names the BLAS kernels chosen for this CPU and, when PyTorch imports
// in figure.h's TorchPython(), MKL's GFLOP/s on the same product (benchmarks/pytorch/sgemm_peak.py).
// It also reruns this figure in a child report on the AVX2 path (figure.h's Avx2ChildLine: oneDNN capped at
// AVX2, tessel's per-ISA kernels on their AVX2 copies), the kernels an AVX2-only CPU gets.
//
// Invariant: both sides run on the calling thread's NumThreads() budget; the ratio is what tessel's
// dispatch, autograd and allocation leave of the BLAS's speed (target >= 0.9, issue 16).
//
// Example:
//   bazel run //benchmarks:report -- --filter=gemm_vs_peak
#include "benchmarks/gemm_peak_workload.h"

#include <memory>
#include <string>
#include <vector>

#include "benchmarks/figure.h"
#include "benchmarks/linear_workload.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/gemm.h"

namespace tessel::bench {

std::function<void()> MakeBlasSquareSgemm(int64_t n) {
  struct Buffers {
    std::vector<float> a, b, c;
  };
  auto buf = std::make_shared<Buffers>();
  buf->a.assign(static_cast<size_t>(n * n), 0.5f);
  buf->b.assign(static_cast<size_t>(n * n), 0.25f);
  buf->c.assign(static_cast<size_t>(n * n), 0.0f);
  return [buf, n] {
    Gemm(DType::kFloat32, MatRef{buf->a.data(), n, n, n, 1}, MatRef{buf->b.data(), n, n, n, 1}, buf->c.data(), n,
         /*accumulate=*/false);
  };
}

namespace {

constexpr int64_t kPeakN = 2048;

std::string TorchSgemmLine() {
  if (!TorchUnavailableReason().empty()) return "MKL via PyTorch: skipped (PyTorch does not import)";
  int status = 0;
  const std::string line = RunAndFindLine(
      Str(TorchPython(), " ", Runfile("benchmarks/pytorch/sgemm_peak.py"), " --threads=", NumThreads(), " --n=", kPeakN),
      "pytorch_sgemm_gflops: ", &status);
  return line.empty() ? std::string("MKL via PyTorch: the PyTorch run printed no result") : line;
}

const bool kRegistered = RegisterFigure("gemm_vs_peak", [] {
  const LinearShape s;
  Figure f{"gemm_vs_peak",
           {"tessel_linear_fwd_bwd", "GFLOP/s", s.Gflop(), MakeTesselLinearFwdBwd(s)},
           Throughput{"blas_sgemm_2048", "GFLOP/s", SquareGemmGflop(kPeakN), MakeBlasSquareSgemm(kPeakN)}};
  f.baseline_is_peak = true;
  f.note = [] {
    if (InAvx2ChildReport()) return Str("gemm backend: ", GemmBackend());
    return Str("gemm backend: ", GemmBackend(), "; ", TorchSgemmLine(), "; AVX2 kernels, oneDNN capped at AVX2: ",
               Avx2ChildLine("gemm_vs_peak"));
  };
  return f;
});

}  // namespace
}  // namespace tessel::bench
