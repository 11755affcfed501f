// benchmarks/gemm_peak_workload.h — the machine's GEMM peak as a benchmark workload: the BLAS behind
// core/ops/gemm.h on an n × n × n float32 product (2·n³ flops per run), with the calling thread's
// NumThreads() budget. The baseline of `gemm_vs_peak` and `attention_vs_gemm_flops`.
//
// Example:
//   Throughput peak{"blas_sgemm_2048", "GFLOP/s", SquareGemmGflop(2048), MakeBlasSquareSgemm(2048)};
#pragma once

#include <cstdint>
#include <functional>

namespace tessel::bench {

inline double SquareGemmGflop(int64_t n) { return 2.0 * static_cast<double>(n) * n * n / 1e9; }
// One run = one product; the closure owns its buffers.
std::function<void()> MakeBlasSquareSgemm(int64_t n);

}  // namespace tessel::bench
