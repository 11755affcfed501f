// pipelining/show_main.cc — `bazel run //pipelining:show`: generate a schedule, lower and verify it, simulate
// it and print the makespan, bubble and peak in-flight activations; optionally write the SVG timeline and
// PyTorch-layout CSVs.
// Usage: bazel run //pipelining:show -- --schedule=ZBVZeroBubble --pp=4 --microbatches=8 [--out=zbv.svg]
//        [--stages_per_rank=V (default 2 for ZBV, DualPipeV, Interleaved1F1B, LoopedBFS; else 1)]
//        [--forward=1 --backward_input=1 --backward_weight=1 --transfer=0] [--fsdp=1] [--grid=1]
//        [--csv=compute.csv] [--lowered_csv=lowered.csv]
// Flags are --name=value, as the other tessel binaries (fsdp/plan_main.cc, examples/gpt/train.cc); relative
// paths are taken from the directory `bazel run` was started in.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "core/base/error.h"
#include "pipelining/lowering.h"
#include "pipelining/schedule_csv.h"
#include "pipelining/schedules.h"
#include "pipelining/simulator.h"
#include "pipelining/timeline_svg.h"
#include "pipelining/verifier.h"

namespace {

using namespace tessel;
using namespace tessel::pipelining;

std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  return (path.empty() || path[0] == '/' || cwd == nullptr) ? path : std::string(cwd) + "/" + path;
}

int DefaultStagesPerRank(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kZBVZeroBubble:
    case ScheduleKind::kDualPipeV:
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kLoopedBFS: return 2;
    default: return 1;
  }
}

void PrintSummary(const SimulationResult& r) {
  std::printf("makespan: %.2f\nbubble: %.4f (mean idle fraction)\nidle per rank:", r.makespan, r.bubble);
  for (double f : r.idle_fraction) std::printf(" %.4f", f);
  std::printf("\npeak in-flight activations per stage:");
  for (int n : r.peak_in_flight) std::printf(" %d", n);
  std::printf("\n");
}

int Run(const std::map<std::string, std::string>& f) {
  auto str = [&](const char* k, const char* d) { return f.count(k) ? f.at(k) : std::string(d); };
  auto num = [&](const char* k, double d) { return f.count(k) ? std::stod(f.at(k)) : d; };
  const ScheduleKind kind = ParseScheduleKind(str("schedule", "1F1B"));
  const int p = static_cast<int>(num("pp", 4)), m = static_cast<int>(num("microbatches", 8));
  const int v = static_cast<int>(num("stages_per_rank", DefaultStagesPerRank(kind)));
  const Program compute = GenerateSchedule(kind, p, p * v, m);
  const std::vector<int> where = VerifyComputeProgram(compute, p * v, m);
  const Program lowered = LowerProgram(compute, where, m, {.fsdp = num("fsdp", 0) != 0});
  VerifyLoweredProgram(lowered, where, m);
  const ActionCosts costs{.forward = num("forward", 1), .backward_input = num("backward_input", 1),
                          .backward_weight = num("backward_weight", 1), .transfer = num("transfer", 0)};
  const SimulationResult r = Simulate(lowered, where, costs);
  std::printf("schedule %s: %d ranks, %d stages (%d per rank), %d microbatches; costs F=%g I=%g W=%g transfer=%g\n",
              std::string(ScheduleName(kind)).c_str(), p, p * v, v, m, costs.forward, costs.backward_input,
              costs.backward_weight, costs.transfer);
  PrintSummary(r);
  if (num("grid", 0) != 0) std::printf("%s", FormatProgram(compute).c_str());
  if (f.count("csv")) SaveCsv(compute, UserPath(f.at("csv")));
  if (f.count("lowered_csv")) SaveCsv(lowered, UserPath(f.at("lowered_csv")));
  if (f.count("out")) {
    const std::string path = UserPath(f.at("out"));
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    TESSEL_CHECK_CODE(ErrorCode::kNotFound, out.good(), "show: cannot open '", path, "' for writing");
    out << TimelineSvg(r, Str(ScheduleName(kind), "  pp=", p, "  stages=", p * v, "  microbatches=", m));
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "show: expected --name=value, got '%s'\n", a.c_str());
      return 2;
    }
    flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  try {
    return Run(flags);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // std::stod on a non-number
    std::fprintf(stderr, "error: bad flag value (%s)\n", e.what());
    return 2;
  }
}
