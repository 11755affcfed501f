// benchmarks/dtensor_workload.h — DTensor workloads: registers the report figures
// `redistribute_vs_collective` and `dtensor_dispatch_overhead_us` (dtensor_workload.cc) and exposes the
// per-op dispatch overhead in microseconds for //benchmarks:dtensor_bench.
//
// Example:
//   double us = tessel::bench::DispatchOverheadMicros(5);   // best of 5, DTensor add minus local add
#pragma once

namespace tessel::bench {

// Per-op overhead of the DTensor path for a small add ([8, 8] float32, [S(0)], 2 ranks): the best of
// `reps` timings of the DTensor op minus the best of `reps` timings of the local op, in microseconds.
double DispatchOverheadMicros(int reps);

}  // namespace tessel::bench
