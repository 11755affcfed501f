// benchmarks/comm_workload.cc — `allgather_bus_bw_vs_memcpy` and `reduce_scatter_bus_bw_vs_memcpy`:
// threads-backend collectives at W = 2 on 64 MiB, as bus bandwidth (nccl-tests convention:
// (W-1)/W * S / t, S = all_gather output / reduce_scatter input per rank) against single-thread memcpy
// of S bytes measured in the same run. One timed run = a fresh 2-rank world doing 8 collectives on
// buffers made and filled once (world start-up included: ~0.1 ms against ~50 ms of copying).
//
// The all-gather figure is the in-place form (the input is this rank's block of the output), which is
// how fully_shard issues it (fsdp/collectives.cc) and what NCCL and nccl-tests call in-place: each rank
// copies only its peers' blocks. The note line measures the out-of-place form too (a separate input:
// each rank also copies its own block, so 2x the bytes of a W=2 bus). comm/comm_bench.cc has the Google
// Benchmark version with more cases.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/figure.h"
#include "comm/backends/threads.h"
#include "core/base/stream_copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

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

Throughput StreamCopyOneThread() {
  auto src = std::make_shared<std::vector<char>>(kBytes, 1);
  auto dst = std::make_shared<std::vector<char>>(kBytes, 0);
  return {"stream_copy", "GB/s", kBytes / 1e9, [src, dst] { StreamCopy(dst->data(), src->data(), kBytes); }};
}

enum class Kind { kAllGatherInPlace, kAllGatherOutOfPlace, kReduceScatter };

Throughput Collective(Kind kind) {
  // Every rank's buffers are made and filled once, outside the timed runs: an input that was never
  // written maps the kernel's shared zero page, which reads from cache and would time only the writes.
  struct Buffers {
    Tensor big, small;
  };
  auto buffers = std::make_shared<std::vector<Buffers>>();
  const int64_t n = kBytes / 4;
  for (int r = 0; r < kWorld; ++r) {
    Buffers b{Full({n}, 1.0 + r), Tensor()};
    b.small = kind == Kind::kAllGatherInPlace ? MakeView(b.big, {n / kWorld}, {1}, r * (n / kWorld)) : Full({n / kWorld}, 3.0 + r);
    buffers->push_back(b);
  }
  auto run = [kind, buffers] {
    comm::RunRanks(kWorld, [kind, buffers](comm::ProcessGroupPtr pg) {
      const Buffers& b = (*buffers)[static_cast<size_t>(pg->rank())];
      pg->Barrier()->Wait();
      for (int i = 0; i < kIters; ++i) {
        (kind == Kind::kReduceScatter ? pg->ReduceScatter(b.small, b.big, comm::ReduceOp::kSum) : pg->AllGather(b.big, b.small))
            ->Wait();
      }
    });
  };
  const double bus_gb = kIters * (kWorld - 1.0) / kWorld * kBytes / 1e9;
  const char* name = kind == Kind::kReduceScatter        ? "reduce_scatter_bus_bw"
                     : kind == Kind::kAllGatherInPlace ? "allgather_in_place_bus_bw"
                                                       : "allgather_bus_bw";
  return {name, "GB/s", bus_gb, run};
}

const bool kAllGather = RegisterFigure("allgather_bus_bw_vs_memcpy", [] {
  Figure f{"allgather_bus_bw_vs_memcpy", Collective(Kind::kAllGatherInPlace), Memcpy()};
  f.note = [] {
    const Figure out_of_place{"allgather_out_of_place", Collective(Kind::kAllGatherOutOfPlace), Memcpy()};
    const FigureResult r = Measure(out_of_place, /*warmup=*/1, /*reps=*/3);
    // The fairest single-thread baseline on this hardware: the streaming copy the backend itself uses.
    const Figure vs_stream{"allgather_vs_stream_copy", Collective(Kind::kAllGatherInPlace), StreamCopyOneThread()};
    const FigureResult s = Measure(vs_stream, /*warmup=*/1, /*reps=*/3);
    char buf[320];
    std::snprintf(buf, sizeof(buf),
                  "out-of-place all_gather (separate input): %.2f GB/s vs memcpy %.2f GB/s ratio %.3f; in-place vs "
                  "single-thread streaming copy (core/base/stream_copy.h) %.2f GB/s: ratio %.3f",
                  r.value, r.baseline, r.value / r.baseline, s.baseline, s.value / s.baseline);
    return std::string(buf);
  };
  return f;
});
const bool kReduceScatter = RegisterFigure("reduce_scatter_bus_bw_vs_memcpy", [] {
  return Figure{"reduce_scatter_bus_bw_vs_memcpy", Collective(Kind::kReduceScatter), Memcpy()};
});

}  // namespace
}  // namespace tessel::bench
