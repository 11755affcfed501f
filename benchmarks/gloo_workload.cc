// benchmarks/gloo_workload.cc — `gloo_allreduce_bus_bw`: all_reduce of 64 MiB float32 between 2
// processes on the gloo backend over loopback TCP (comm/gloo_bench.cc under the tessel_run launcher,
// both from this binary's runfiles), as bus bandwidth 2 (W-1)/W S / t (nccl-tests convention, best of
// 5). The baseline is single-thread memcpy of S measured in this process, for scale (no target yet).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/figure.h"

namespace tessel::bench {
namespace {

constexpr int64_t kBytes = int64_t{64} << 20;

// GB/s printed by rank 0 of gloo_bench (throws when the run failed).
double RunGlooBench() {
  return RunAndReadNumber(Runfile("comm/tessel_run") + " --nproc-per-node 2 --master-port 0 " +
                              Runfile("comm/gloo_bench") + " 5",
                          "gloo_allreduce_bus_bw: ", "gloo_bench under tessel_run");
}

double MemcpyGbs() {
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), kBytes);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return kBytes / best / 1e9;
}

const bool kGloo = RegisterFigure("gloo_allreduce_bus_bw", [] {
  Figure f{"gloo_allreduce_bus_bw", {"gloo_allreduce_bus_bw", "GB/s", 0, nullptr},
           Throughput{"memcpy", "GB/s", 0, nullptr}};
  f.precomputed = [] { return std::pair<double, double>{RunGlooBench(), MemcpyGbs()}; };
  f.note = [] { return std::string("gloo: 2 processes (tessel_run), loopback TCP, 64 MiB float32, best of 5"); };
  return f;
});

}  // namespace
}  // namespace tessel::bench
