// benchmarks/attention_bench.cc — Google Benchmark suite for the fused causal attention (forward, and
// forward + backward through autograd; also on the AVX2 kernels) and the BLAS sgemm peak, on one thread by
// default.
//
// Counters are useful GFLOP per second of this thread's CPU time (not wall time), so the suite stays
// meaningful on a machine shared with other work; compare rows, never absolute times. Useful flops: see
// attention_workload.cc (unmasked pairs, 2 products forward, 4 backward).
//
// Example:
//   bazel run //benchmarks:attention_bench -- --benchmark_filter=Attention
#include <benchmark/benchmark.h>

#include <vector>

#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/ops/attention.h"
#include "core/ops/attention_kernels.h"
#include "core/ops/vector_isa.h"
#include "core/ops/gemm.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::bench {
namespace {

// args: {batch·heads, T, D, threads}
double PairsGflop(const benchmark::State& state, int products) {
  const double t = static_cast<double>(state.range(1));
  return static_cast<double>(state.range(0)) * products * 2.0 * t * (t + 1) / 2 * state.range(2) / 1e9;
}

void BM_AttentionFwdBwd(benchmark::State& state) {
  NumThreadsGuard threads(static_cast<int>(state.range(3)));
  Generator gen(1);
  const Shape shape{state.range(0), state.range(1), state.range(2)};
  Tensor q = Randn(shape, gen), k = Randn(shape, gen), v = Randn(shape, gen), g = Randn(shape, gen);
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  for (auto _ : state) {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    Backward(ScaledDotProductAttention(q, k, v, true), g);
  }
  state.counters["GFLOP"] = benchmark::Counter(PairsGflop(state, 6) * state.iterations(), benchmark::Counter::kIsRate);
}

// The same on the AVX2 kernels (what an AVX2-only CPU runs), forced on an AVX-512 machine.
void BM_AttentionFwdBwdAvx2(benchmark::State& state) {
  ForceVectorIsaForTesting(VectorIsa::kAvx2);
  BM_AttentionFwdBwd(state);
  ForceVectorIsaForTesting(VectorIsa::kAuto);
}

void BM_AttentionFwd(benchmark::State& state) {
  NumThreadsGuard threads(static_cast<int>(state.range(3)));
  Generator gen(1);
  const Shape shape{state.range(0), state.range(1), state.range(2)};
  Tensor q = Randn(shape, gen), k = Randn(shape, gen), v = Randn(shape, gen);
  for (auto _ : state) benchmark::DoNotOptimize(ScaledDotProductAttention(q, k, v, true));
  state.counters["GFLOP"] = benchmark::Counter(PairsGflop(state, 2) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Sgemm(benchmark::State& state) {
  NumThreadsGuard threads(static_cast<int>(state.range(1)));
  const int64_t n = state.range(0);
  std::vector<float> buf(static_cast<size_t>(3 * n * n), 0.5f);
  float* p = buf.data();
  for (auto _ : state) Gemm(DType::kFloat32, MatRef{p, n, n, n, 1}, MatRef{p + n * n, n, n, n, 1}, p + 2 * n * n, n, false);
  state.counters["GFLOP"] = benchmark::Counter(2.0 * n * n * n / 1e9 * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_AttentionFwdBwd)->Args({128, 128, 32, 1})->Args({128, 128, 32, 2})->Args({8, 1024, 64, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionFwdBwdAvx2)->Args({128, 128, 32, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionFwd)->Args({128, 128, 32, 1})->Args({8, 1024, 64, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sgemm)->Args({1024, 1})->Args({2048, 1})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel::bench

BENCHMARK_MAIN();
