// comm/comm_bench.cc — threads-backend collective bandwidth vs single-thread memcpy (Google Benchmark).
//
// Figures (W = 2, 64 MiB): bus bandwidth = (W-1)/W * S / t, the nccl-tests convention, where S is the
// all_gather output / reduce_scatter input per rank; baseline = single-thread memcpy of S bytes
// (std::memcpy, buffers touched beforehand). With --benchmark_repetitions=N each figure is the best
// of N (robust to other load on a shared machine). At the end it prints one line per figure:
//   <name>: <value> GB/s vs memcpy_bw: <value> GB/s ratio <r>
// Run: bazel run //comm:comm_bench  (add --benchmark_filter=... to pick some)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "comm/backends/threads.h"
#include "comm/reduce.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kBytes = int64_t{64} << 20;
constexpr int kWorld = 2;

enum class Kind { kAllGather, kAllGatherInPlace, kReduceScatter, kAllReduce };

// Seconds per collective on a fresh `world`-rank threads world (rank 0's clock, buffers touched first).
double TimeCollective(Kind kind, int world, int64_t bytes, int iters) {
  double seconds = 0;
  RunRanks(world, [&](ProcessGroupPtr pg) {
    const int64_t n = bytes / 4;  // float32 elements of S
    Tensor big = Full({n}, pg->rank() + 1.0);
    Tensor small = Full({n / world}, pg->rank() + 1.0);
    Tensor own_slice = MakeView(big, {n / world}, {1}, pg->rank() * (n / world));
    auto run = [&] {
      switch (kind) {
        case Kind::kAllGather: return pg->AllGather(big, small);
        case Kind::kAllGatherInPlace: return pg->AllGather(big, own_slice);
        case Kind::kReduceScatter: return pg->ReduceScatter(small, big, ReduceOp::kSum);
        case Kind::kAllReduce: return pg->AllReduce(big, ReduceOp::kSum);
      }
      return pg->Barrier();
    };
    run()->Wait();  // warm-up
    pg->Barrier()->Wait();
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) run()->Wait();
    pg->Barrier()->Wait();
    if (pg->rank() == 0) seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  });
  return seconds;
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

// Diagnostic ceiling: two threads each copying S/2 at once (what the in-place all_gather does per rank).
void BM_MemcpyTwoThreads(benchmark::State& state) {
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  for (auto _ : state) {
    const auto start = Clock::now();
    std::thread other([&] { std::memcpy(dst.data() + kBytes / 2, src.data() + kBytes / 2, kBytes / 2); });
    std::memcpy(dst.data(), src.data(), kBytes / 2);
    other.join();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - start).count());
  }
  state.SetBytesProcessed(state.iterations() * kBytes / 2);  // bus bytes of the W=2 all_gather
}

// Diagnostic: the reduction kernel alone on one thread, out = a + b over S/2 floats each (what one
// rank of the W=2 reduce_scatter computes), reported as the bus bytes of that reduce_scatter.
void BM_ReduceKernel(benchmark::State& state) {
  const int64_t n = kBytes / 4 / 2;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), out(n, 0.0f);
  const void* inputs[] = {a.data(), b.data()};
  for (auto _ : state) {
    ReduceRange(DType::kFloat32, ReduceOp::kSum, out.data(), inputs, 0, n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kBytes / 2);
}

template <Kind kKind>
void BM_Collective(benchmark::State& state) {
  for (auto _ : state) state.SetIterationTime(TimeCollective(kKind, kWorld, kBytes, 4));
  // Bus bytes: all_reduce moves 2 (W-1)/W S per rank, the others (W-1)/W S.
  const double factor = (kKind == Kind::kAllReduce ? 2.0 : 1.0) * (kWorld - 1) / kWorld;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * factor * kBytes));
}

BENCHMARK(BM_Memcpy)->Name("memcpy_bw")->MinTime(0.5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemcpyTwoThreads)
    ->Name("two_thread_half_memcpy_bus_bw")->UseManualTime()->MinTime(0.5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReduceKernel)->Name("reduce_kernel_one_thread_bus_bw")->MinTime(0.5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Collective<Kind::kAllGather>)
    ->Name("allgather_bus_bw_vs_memcpy")->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Collective<Kind::kAllGatherInPlace>)
    ->Name("allgather_inplace_bus_bw_vs_memcpy")->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Collective<Kind::kReduceScatter>)
    ->Name("reduce_scatter_bus_bw_vs_memcpy")->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Collective<Kind::kAllReduce>)
    ->Name("allreduce_bus_bw_vs_memcpy")->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);

// Console output as usual, plus the ratio lines at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      auto it = run.counters.find("bytes_per_second");
      if (run.run_type != Run::RT_Iteration || it == run.counters.end()) continue;
      // Best of the repetitions: the machine may be shared, and load only ever slows a run down.
      double& best = gbps_[run.run_name.function_name];
      best = std::max(best, it->second.value / 1e9);
    }
  }
  void PrintRatios() const {
    auto base = gbps_.find("memcpy_bw");
    for (const auto& [name, value] : gbps_) {
      if (name == "memcpy_bw") continue;
      if (base == gbps_.end()) {
        std::printf("%s: %.2f GB/s\n", name.c_str(), value);
      } else {
        std::printf("%s: %.2f GB/s vs memcpy_bw: %.2f GB/s ratio %.2f\n", name.c_str(), value, base->second,
                    value / base->second);
      }
    }
  }

 private:
  std::map<std::string, double> gbps_;
};

}  // namespace
}  // namespace tessel::comm

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // Google Benchmark owns this binary's flags (--benchmark_*)
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;  // unknown flags are errors
  tessel::comm::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
