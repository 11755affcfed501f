// benchmarks/report.cc — `bazel run //benchmarks:report`: measures every registered headline figure
// (benchmarks/figure.h) and prints one line each:
//   <name>: <value> <unit> vs <baseline>: <value> <unit> ratio <r>
//
// Runner: a small C++ timer (figure.h's Measure), not Google Benchmark — 1 warmup run per side, then
// --reps timed runs (default 5) alternating value and baseline, medians. Threads: NumThreads() of the
// main thread (all cores, or --threads=N; the PyTorch baselines get the same number). Adding a figure:
// register it with RegisterFigure in a benchmark library and add that library to this binary's deps;
// nothing here changes.
//
// Example:
//   bazel run //benchmarks:report                       # all figures
//   bazel run //benchmarks:report -- --reps=9 --filter=linear
//   bazel run //benchmarks:report -- --threads=1 --filter=pytorch   # both sides on one thread
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "benchmarks/figure.h"
#include "core/base/parallel.h"
#include "core/ops/vector_isa.h"

ABSL_FLAG(int, reps, 5, "timed runs per side (median)");
ABSL_FLAG(std::string, filter, "", "only the figures whose name contains this substring");
ABSL_FLAG(int, threads, 0, "the main thread's thread budget (0: all cores)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("report [--reps=N] [--filter=SUBSTRING] [--threads=N]: the headline figures");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);  // unknown flags are errors
  if (rest.size() > 1) {
    std::fprintf(stderr, "usage: report [--reps=N] [--filter=SUBSTRING] [--threads=N]\n");
    return 2;
  }
  const int reps = absl::GetFlag(FLAGS_reps);
  const std::string filter = absl::GetFlag(FLAGS_filter);
  if (absl::GetFlag(FLAGS_threads) > 0) tessel::SetNumThreads(absl::GetFlag(FLAGS_threads));
  if (tessel::bench::InAvx2ChildReport()) tessel::ForceVectorIsaForTesting(tessel::VectorIsa::kAvx2);
  std::fprintf(stderr, "# %d threads, %d timed reps per side (median)\n", tessel::NumThreads(), reps);
  int failed = 0;
  for (const auto& [name, make] : tessel::bench::RegisteredFigures()) {
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    try {
      const tessel::bench::Figure figure = make();
      const tessel::bench::FigureResult result = tessel::bench::Measure(figure, /*warmup=*/1, reps);
      std::printf("%s\n", tessel::bench::FormatLine(figure, result).c_str());
      if (figure.note && result.skipped.empty()) std::printf("# %s\n", figure.note().c_str());
    } catch (const std::exception& e) {  // one broken figure must not hide the others
      std::printf("%s: failed (%s)\n", name.c_str(), e.what());
      ++failed;
    }
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}
