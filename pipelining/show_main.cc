// pipelining/show_main.cc — `bazel run //pipelining:show`: generate a schedule, lower and verify it, simulate
// it and print the makespan, bubble and peak in-flight activations; optionally write the SVG timeline and
// PyTorch-layout CSVs.
// Usage: bazel run //pipelining:show -- --schedule=ZBVZeroBubble --pp=4 --microbatches=8 [--out=zbv.svg]
//        [--stages_per_rank=V (default 2 for ZBV, DualPipeV, Interleaved1F1B, LoopedBFS; else 1)]
//        [--forward=1 --backward_input=1 --backward_weight=1 --transfer=0] [--fsdp=1] [--grid=1]
//        [--csv=compute.csv] [--lowered_csv=lowered.csv]
// Flags are absl flags, as the other tessel binaries (--help lists them; unknown flags are errors); relative
// paths are taken from the directory `bazel run` was started in.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/base/error.h"
#include "pipelining/lowering.h"
#include "pipelining/schedule_csv.h"
#include "pipelining/schedules.h"
#include "pipelining/simulator.h"
#include "pipelining/timeline_svg.h"
#include "pipelining/verifier.h"

ABSL_FLAG(std::string, schedule, "1F1B", "schedule name (GPipe, 1F1B, Interleaved1F1B, LoopedBFS, ZBVZeroBubble, ...)");
ABSL_FLAG(int, pp, 4, "pipeline ranks");
ABSL_FLAG(int, microbatches, 8, "microbatches per step");
ABSL_FLAG(std::optional<int>, stages_per_rank, std::nullopt,
          "stages per rank (default 2 for ZBV, DualPipeV, Interleaved1F1B, LoopedBFS; else 1)");
ABSL_FLAG(double, forward, 1, "simulated cost of F");
ABSL_FLAG(double, backward_input, 1, "simulated cost of I (and of B = I + W)");
ABSL_FLAG(double, backward_weight, 1, "simulated cost of W");
ABSL_FLAG(double, transfer, 0, "simulated cost of one p2p transfer");
ABSL_FLAG(bool, fsdp, false, "lower with the FSDP actions (UNSHARD / RESHARD / REDUCE_GRAD)");
ABSL_FLAG(bool, grid, false, "print the compute program as a grid");
ABSL_FLAG(std::string, out, "", "write the SVG timeline to this path");
ABSL_FLAG(std::string, csv, "", "write the compute program as PyTorch-layout CSV");
ABSL_FLAG(std::string, lowered_csv, "", "write the lowered program as PyTorch-layout CSV");

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

int Run() {
  const ScheduleKind kind = ParseScheduleKind(absl::GetFlag(FLAGS_schedule));
  const int p = absl::GetFlag(FLAGS_pp), m = absl::GetFlag(FLAGS_microbatches);
  const int v = absl::GetFlag(FLAGS_stages_per_rank).value_or(DefaultStagesPerRank(kind));
  const Program compute = GenerateSchedule(kind, p, p * v, m);
  const std::vector<int> where = VerifyComputeProgram(compute, p * v, m);
  const Program lowered = LowerProgram(compute, where, m, {.fsdp = absl::GetFlag(FLAGS_fsdp)});
  VerifyLoweredProgram(lowered, where, m);
  const ActionCosts costs{.forward = absl::GetFlag(FLAGS_forward),
                          .backward_input = absl::GetFlag(FLAGS_backward_input),
                          .backward_weight = absl::GetFlag(FLAGS_backward_weight),
                          .transfer = absl::GetFlag(FLAGS_transfer)};
  const SimulationResult r = Simulate(lowered, where, costs);
  std::printf("schedule %s: %d ranks, %d stages (%d per rank), %d microbatches; costs F=%g I=%g W=%g transfer=%g\n",
              std::string(ScheduleName(kind)).c_str(), p, p * v, v, m, costs.forward, costs.backward_input,
              costs.backward_weight, costs.transfer);
  PrintSummary(r);
  if (absl::GetFlag(FLAGS_grid)) std::printf("%s", FormatProgram(compute).c_str());
  if (!absl::GetFlag(FLAGS_csv).empty()) SaveCsv(compute, UserPath(absl::GetFlag(FLAGS_csv)));
  if (!absl::GetFlag(FLAGS_lowered_csv).empty()) SaveCsv(lowered, UserPath(absl::GetFlag(FLAGS_lowered_csv)));
  if (!absl::GetFlag(FLAGS_out).empty()) {
    const std::string path = UserPath(absl::GetFlag(FLAGS_out));
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    TESSEL_CHECK_CODE(ErrorCode::kNotFound, out.good(), "show: cannot open '", path, "' for writing");
    out << TimelineSvg(r, Str(ScheduleName(kind), "  pp=", p, "  stages=", p * v, "  microbatches=", m));
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("generate, lower, verify and simulate a pipeline schedule");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "show: unexpected argument '%s' (flags are --name=value)\n", rest[1]);
    return 2;
  }
  try {
    return Run();
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
