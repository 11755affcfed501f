// benchmarks/comm_workload.cc — `allgather_bus_bw_vs_memcpy` and `reduce_scatter_bus_bw_vs_memcpy`:
// threads-backend collectives at W = 2 on 64 MiB, as bus bandwidth (nccl-tests convention:
// (W-1)/W * S / t, S = all_gather output / reduce_scatter input per rank) against single-thread memcpy
// of S bytes measured in the same run. One timed run = a fresh 2-rank world doing 8 collectives
// on buffers reused from the previous run (world start-up included: ~0.1 ms against ~50 ms of copying). comm/comm_bench.cc has the Google Benchmark version with more cases.
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "benchmarks/figure.h"
#include "comm/backends/threads.h"
#include "core/tensor/factory.h"

namespace tessel::bench {
namespace {

constexpr int64_t kBytes = int64_t{64} << 20;
constexpr int kWorld = 2;
constexpr int kIters = 8;

Throughput Memcpy() {
  auto src = std::make_shared<std::vector<char>>(kBytes, 1);
  auto dst = std::make_shared<std::vector<char>>(kBytes, 0);
  return {"memcpy", "GB/s", kBytes / 1e9, [src, dst] { std::memcpy(dst->data(), src->data(), kBytes); }};
}

Throughput Collective(bool gather) {
  auto run = [gather] {
    comm::RunRanks(kWorld, [gather](comm::ProcessGroupPtr pg) {
      const int64_t n = kBytes / 4;
      // Empty, not Full: the allocator's block cache hands back the previous run's (warm) buffers, so a
      // run times the collectives, not page faults or fills. Values are irrelevant to bandwidth.
      Tensor big = Empty({n});
      Tensor small = Empty({n / kWorld});
      pg->Barrier()->Wait();
      for (int i = 0; i < kIters; ++i) {
        (gather ? pg->AllGather(big, small) : pg->ReduceScatter(small, big, comm::ReduceOp::kSum))->Wait();
      }
    });
  };
  const double bus_gb = kIters * (kWorld - 1.0) / kWorld * kBytes / 1e9;
  return {gather ? "allgather_bus_bw" : "reduce_scatter_bus_bw", "GB/s", bus_gb, run};
}

const bool kAllGather = RegisterFigure("allgather_bus_bw_vs_memcpy", [] {
  return Figure{"allgather_bus_bw_vs_memcpy", Collective(true), Memcpy()};
});
const bool kReduceScatter = RegisterFigure("reduce_scatter_bus_bw_vs_memcpy", [] {
  return Figure{"reduce_scatter_bus_bw_vs_memcpy", Collective(false), Memcpy()};
});

}  // namespace
}  // namespace tessel::bench
