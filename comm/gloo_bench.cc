// comm/gloo_bench.cc — gloo all_reduce bus bandwidth, 64 MiB of float32 per rank (--bytes: another size;
// small sizes measure latency: the line also gives the best time per call in µs).
//
// Run under the launcher:  tessel_run --nproc-per-node 2 --master-port 0 gloo_bench [--iters=N | N]
// (absl flags; the positional iteration count of earlier versions still works; unknown flags are errors).
// Rank 0 prints `gloo_allreduce_bus_bw: <v> GB/s` (bus bytes 2 (W-1)/W S per all_reduce, nccl-tests
// convention; best iteration, since the machine may be shared).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "comm/backends/gloo.h"
#include "core/tensor/factory.h"

ABSL_FLAG(int, iters, 5, "timed all_reduces (the best is reported)");
ABSL_FLAG(int64_t, bytes, int64_t{64} << 20, "bytes per rank (a multiple of 4: float32)");

int main(int argc, char** argv) {
  using namespace tessel;
  absl::SetProgramUsageMessage("gloo_bench [--iters=N | N]: gloo all_reduce bus bandwidth (run under tessel_run)");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 2) {
    std::fprintf(stderr, "gloo_bench: unexpected argument '%s'\n", rest[2]);
    return 2;
  }
  const int iters = rest.size() == 2 ? std::atoi(rest[1]) : absl::GetFlag(FLAGS_iters);
  const int64_t bytes = absl::GetFlag(FLAGS_bytes);
  if (bytes < 4 || bytes % 4 != 0) {
    std::fprintf(stderr, "gloo_bench: --bytes=%lld is not a positive multiple of 4\n", static_cast<long long>(bytes));
    return 2;
  }
  comm::ProcessGroupPtr pg = comm::InitProcessGroupFromEnv();
  Tensor t = Full({bytes / 4}, 1.0);
  pg->AllReduce(t, comm::ReduceOp::kSum)->Wait();  // warm-up (connections, page faults)
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    pg->Barrier()->Wait();
    const auto start = std::chrono::steady_clock::now();
    pg->AllReduce(t, comm::ReduceOp::kSum)->Wait();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const int w = pg->size();
  if (pg->rank() == 0) {
    std::printf("gloo_allreduce_bus_bw: %.2f GB/s (W=%d, %.1f us per %lld-byte all_reduce)\n",
                2.0 * (w - 1) / w * bytes / best / 1e9, w, best * 1e6, static_cast<long long>(bytes));
  }
  pg->Barrier()->Wait();
  return 0;
}
