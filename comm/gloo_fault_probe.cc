// comm/gloo_fault_probe.cc — how long the gloo backend takes to report a peer process that is gone.
//
// Run under the launcher:  tessel_run --nproc-per-node 2 --master-port 0 --exit-grace-s 60 gloo_fault_probe
// The last rank broadcasts the wall-clock time at which it will exit, exits (code 0, no cleanup) at that
// time, and the others, already waiting in a barrier, time the error. Rank 0 prints
// `fault_detect_s: <seconds> (<error code>)`; a run where the barrier does not fail exits 1.
// Invariant: the probe never waits longer than its 60 s comm timeout.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "comm/backends/gloo.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"

int main(int argc, char** argv) {
  using namespace tessel;
  absl::SetProgramUsageMessage("gloo_fault_probe (no arguments; run under tessel_run): gloo's fault detection time");
  if (absl::ParseCommandLine(argc, argv).size() > 1) {  // --help works; unknown flags are errors
    std::fprintf(stderr, "gloo_fault_probe: takes no arguments\n");
    return 2;
  }
  using SysClock = std::chrono::system_clock;
  auto now_s = [] { return std::chrono::duration<double>(SysClock::now().time_since_epoch()).count(); };
  comm::ProcessGroupPtr pg = comm::InitProcessGroupFromEnv();
  pg->set_timeout(std::chrono::milliseconds(60000));
  const int victim = pg->size() - 1;
  Tensor when = Full({1}, pg->rank() == victim ? now_s() + 0.3 : 0.0, DType::kFloat64);
  pg->Broadcast(when, victim)->Wait();
  const double exit_at = when.item<double>();
  if (pg->rank() == victim) {
    std::this_thread::sleep_for(std::chrono::duration<double>(exit_at - now_s()));
    std::_Exit(0);
  }
  try {
    pg->Barrier()->Wait();
  } catch (const Error& e) {
    const double detect = now_s() - exit_at;
    if (pg->rank() == 0) std::printf("fault_detect_s: %.4f (%s)\n", detect, std::string(ErrorCodeName(e.code())).c_str());
    return 0;
  }
  std::fprintf(stderr, "gloo_fault_probe: the barrier completed without the exited rank\n");
  return 1;
}
