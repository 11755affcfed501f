// benchmarks/linear_bench.cc — Google Benchmark suite for Linear forward + backward against raw Eigen.
//
// BM_LinearFwdBwd runs tessel's Linear forward and backward (grad_x, grad_w; op "linear" through
// autograd); BM_EigenGemmFwdBwd runs the same three GEMMs on raw Eigen with the same threads. Both
// report a GFLOP counter shown as a rate (GFLOP=…/s); compare them, never the absolute times (DESIGN.md "Benchmarks").
// BM_MlpFcFused / BM_MlpFcUnfused: the GPT MLP's fc with its GELU (x [2048, 256] → [2048, 1024], bias;
// forward + backward, or forward only), as one linear_gelu op against Linear then Gelu; compare the two
// (their GFLOP counter counts the three GEMMs of forward + backward even for the forward-only rows).
//
// Example:
//   bazel run //benchmarks:linear_bench -- --benchmark_filter=Linear
#include <benchmark/benchmark.h>

#include "benchmarks/linear_workload.h"

namespace tessel::bench {
namespace {

LinearShape ShapeOf(const benchmark::State& state) {
  return LinearShape{state.range(0), state.range(1), state.range(2)};
}

void SetGflops(benchmark::State& state, const LinearShape& s) {
  state.counters["GFLOP"] =
      benchmark::Counter(s.Gflop() * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_LinearFwdBwd(benchmark::State& state) {
  const LinearShape s = ShapeOf(state);
  auto run = MakeTesselLinearFwdBwd(s);
  run();  // warm up the allocator and Eigen's blocking buffers
  for (auto _ : state) run();
  SetGflops(state, s);
}

void BM_EigenGemmFwdBwd(benchmark::State& state) {
  const LinearShape s = ShapeOf(state);
  auto run = MakeEigenGemmFwdBwd(s);
  run();
  for (auto _ : state) run();
  SetGflops(state, s);
}

// {rows, in_features, out_features}: the GPT-size shape of the issue, and a small one.
BENCHMARK(BM_LinearFwdBwd)
    ->Args({4096, 1024, 4096})
    ->Args({512, 768, 768})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// range(3): 1 = forward + backward, 0 = forward only.
void RunMlpFc(benchmark::State& state, bool fused) {
  const LinearShape s = ShapeOf(state);
  auto run = MakeTesselMlpFcFwdBwd(s, fused, state.range(3) != 0);
  run();
  for (auto _ : state) run();
  SetGflops(state, s);
}
void BM_MlpFcFused(benchmark::State& state) { RunMlpFc(state, /*fused=*/true); }
void BM_MlpFcUnfused(benchmark::State& state) { RunMlpFc(state, /*fused=*/false); }

// The reference GPT step's MLP fc: batch 16 × seq 128 rows, d_model 256 → 4 · 256.
BENCHMARK(BM_MlpFcFused)
    ->Args({2048, 256, 1024, 1})
    ->Args({2048, 256, 1024, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MlpFcUnfused)
    ->Args({2048, 256, 1024, 1})
    ->Args({2048, 256, 1024, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_EigenGemmFwdBwd)
    ->Args({4096, 1024, 4096})
    ->Args({512, 768, 768})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tessel::bench

BENCHMARK_MAIN();
