// benchmarks/fault_workload.cc — `fault_detect_s_threads` and `fault_detect_s_gloo`: seconds from a
// peer's exit to the error on a rank waiting for it in a barrier (lower is better; target <= 1 s, the
// comm timeout being 300 s). Threads backend: 2 rank threads, rank 1 returns from RunRanks; median of
// 5. Gloo: 2 processes on loopback under tessel_run (//comm:gloo_fault_probe), the last one exits.
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/figure.h"
#include "comm/backends/threads.h"
#include "core/base/error.h"

namespace tessel::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ThreadsFaultDetectSeconds() {
  std::vector<double> runs;
  for (int rep = 0; rep < 5; ++rep) {
    Clock::time_point exited{}, detected{};
    comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
      if (pg->rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 is waiting by now
        exited = Clock::now();
        return;
      }
      try {
        pg->Barrier()->Wait();
      } catch (const Error&) {
        detected = Clock::now();
      }
    });
    if (detected == Clock::time_point{}) throw std::runtime_error("the barrier did not fail");
    runs.push_back(std::chrono::duration<double>(detected - exited).count());
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

double GlooFaultDetectSeconds() {
  return RunAndReadNumber(Runfile("comm/tessel_run") + " --nproc-per-node 2 --master-port 0 --exit-grace-s 60 " +
                              Runfile("comm/gloo_fault_probe"),
                          "fault_detect_s: ", "gloo_fault_probe under tessel_run");
}

Figure Latency(const std::string& name, std::function<double()> measure, std::string note) {
  Figure f{name, {name, "s", 0, nullptr}, std::nullopt};
  f.precomputed = [measure = std::move(measure)] { return std::pair<double, double>{measure(), 0.0}; };
  f.note = [note = std::move(note)] { return note; };
  return f;
}

const bool kThreads = RegisterFigure("fault_detect_s_threads", [] {
  return Latency("fault_detect_s_threads", ThreadsFaultDetectSeconds,
                 "threads: rank 1 returns from RunRanks while rank 0 waits in a barrier; median of 5");
});

const bool kGloo = RegisterFigure("fault_detect_s_gloo", [] {
  return Latency("fault_detect_s_gloo", GlooFaultDetectSeconds,
                 "gloo: 2 processes (tessel_run), the last exits (code 0, no cleanup) while rank 0 waits in a "
                 "barrier; wall clock from its exit to rank 0's error");
});

}  // namespace
}  // namespace tessel::bench
