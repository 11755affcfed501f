// benchmarks/dtensor_bench.cc — `bazel run //benchmarks:dtensor_bench`: the two DTensor figures as the
// report prints them, plus the dispatch overhead in microseconds (the unit).
//
// Example:
//   bazel run //benchmarks:dtensor_bench -- --reps=9
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "benchmarks/dtensor_workload.h"
#include "benchmarks/figure.h"

ABSL_FLAG(int, reps, 5, "timed runs per side (median; best of for the dispatch overhead)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("dtensor_bench [--reps=N]: the DTensor figures and the dispatch overhead in us");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);  // unknown flags are errors
  if (rest.size() > 1) {
    std::fprintf(stderr, "usage: dtensor_bench [--reps=N]\n");
    return 2;
  }
  const int reps = absl::GetFlag(FLAGS_reps);
  for (const auto& [name, make] : tessel::bench::RegisteredFigures()) {
    if (name != "redistribute_vs_collective" && name != "dtensor_dispatch_overhead_us") continue;
    const tessel::bench::Figure figure = make();
    std::printf("%s\n", tessel::bench::FormatLine(figure, tessel::bench::Measure(figure, 1, reps)).c_str());
  }
  std::printf("dtensor_dispatch_overhead_us: %.2f us per op (best of %d)\n",
              tessel::bench::DispatchOverheadMicros(reps), reps);
  return 0;
}
