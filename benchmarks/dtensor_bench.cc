// benchmarks/dtensor_bench.cc — `bazel run //benchmarks:dtensor_bench`: the two DTensor figures as the
// report prints them, plus the dispatch overhead in microseconds (the unit).
//
// Example:
//   bazel run //benchmarks:dtensor_bench -- --reps=9
#include <cstdio>
#include <cstdlib>
#include <string>

#include "benchmarks/dtensor_workload.h"
#include "benchmarks/figure.h"

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--reps=", 0) != 0) {
      std::fprintf(stderr, "usage: dtensor_bench [--reps=N]\n");
      return 2;
    }
    reps = std::atoi(arg.c_str() + 7);
  }
  for (const auto& [name, make] : tessel::bench::RegisteredFigures()) {
    if (name != "redistribute_vs_collective" && name != "dtensor_dispatch_overhead_us") continue;
    const tessel::bench::Figure figure = make();
    std::printf("%s\n", tessel::bench::FormatLine(figure, tessel::bench::Measure(figure, 1, reps)).c_str());
  }
  std::printf("dtensor_dispatch_overhead_us: %.2f us per op (best of %d)\n",
              tessel::bench::DispatchOverheadMicros(reps), reps);
  return 0;
}
