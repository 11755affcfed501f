// benchmarks/gloo_workload.cc — `gloo_allreduce_bus_bw`: all_reduce of 64 MiB float32 between 2
// processes on the gloo backend over loopback TCP (comm/gloo_bench.cc under the tessel_run launcher,
// both from this binary's runfiles), as bus bandwidth 2 (W-1)/W S / t (nccl-tests convention, best of
// 5). The baseline is single-thread memcpy of S measured in this process, for scale (no target yet).
// `fsdp_gloo_step_vs_pytorch` (issue 16): the reference GPT step under fully_shard on 2 gloo processes
// (fsdp_gloo_step.cc under tessel_run) against PyTorch FSDP2 on 2 gloo processes
// (pytorch/fsdp_gloo_step.py, same model, global batch and threads), global tokens/s. Target >= 1.2;
// "skipped" without PyTorch (figure.h's TorchPython).
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

// The number after `key` in the line a command prints (0 when the command failed); `line` keeps it.
double ReadTokensPerS(const std::string& command, const std::string& key, std::string* line) {
  int status = 0;
  *line = RunAndFindLine(command, key, &status);
  const size_t colon = line->find(": ");
  return status == 0 && colon != std::string::npos ? std::atof(line->c_str() + colon + 2) : 0;
}

const bool kFsdpGloo = RegisterFigure("fsdp_gloo_step_vs_pytorch", [] {
  auto lines = std::make_shared<std::pair<std::string, std::string>>();
  Figure f{"fsdp_gloo_step_vs_pytorch", {"tessel_fsdp_gloo_step", "tokens/s", 0, nullptr},
           Throughput{"pytorch_fsdp2_gloo_step", "tokens/s", 0, nullptr}};
  f.unavailable = [] { return TorchUnavailableReason(); };
  f.precomputed = [lines] {
    const double tessel =
        ReadTokensPerS(Runfile("comm/tessel_run") + " --nproc-per-node 2 --master-port 0 " +
                           Runfile("benchmarks/fsdp_gloo_step") + " 5 4",
                       "tessel_fsdp_gloo_tokens_per_s: ", &lines->first);
    const double torch = ReadTokensPerS(
        TorchPython() + " " + Runfile("benchmarks/pytorch/fsdp_gloo_step.py") + " --world=2 --reps=5 --steps=4",
        "pytorch_fsdp_gloo_tokens_per_s: ", &lines->second);
    return std::pair<double, double>{tessel, torch};
  };
  f.note = [lines] { return lines->first + " | " + lines->second; };
  return f;
});

}  // namespace
}  // namespace tessel::bench
