// core/base/parallel.h — intra-op parallelism (a small process-wide worker pool, parallel.cc) with a
// per-thread thread budget.
//
// Invariant: a kernel never uses more threads than NumThreads() of the calling thread. The threads
// backend sets each rank thread's budget to max(1, cores / ranks in this process) so ranks sharing a
// process never oversubscribe the machine (DESIGN.md "Threads and cores").
//
// Example:
//   ParallelFor(0, n, 4096, [&](int64_t begin, int64_t end) { for (i = begin; i < end; ++i) y[i] = ...; });
#pragma once

#include <cstdint>
#include <functional>

namespace tessel {

// Threads a kernel on this thread may use (default: HardwareConcurrency(), the CPUs this process may use).
int NumThreads();
// Sets this thread's budget (n >= 1).
void SetNumThreads(int n);
// CPUs this process may run on: its affinity mask at the first call (taskset, cpusets), not the machine's.
int HardwareConcurrency();

class NumThreadsGuard {
 public:
  explicit NumThreadsGuard(int n);
  ~NumThreadsGuard();

 private:
  int previous_;
};

// Splits [begin, end) into contiguous ranges of at least `grain` elements and runs fn(range_begin,
// range_end) on up to NumThreads() threads (the caller and pool workers; each starts on a slice of its
// own — the caller on the first — and steals from the others when done). Runs inline when the range is
// small or inside another ParallelFor (there NumThreads() is 1). Returns when every range is done; an
// exception from fn is rethrown then.
void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// ParallelFor for work items that prefetch their successor's operands: [begin, end) is cut into ranges
// of exactly `grain` elements (the last may be shorter; larger ones beyond 2^30 ranges), each one unit of
// work stealing, so the threads finish within about one range of each other where ParallelFor's chunks
// (up to 4 per thread) can leave one idle for most of a chunk while another, slowed by other work on the
// machine, finishes its own. Each thread still starts on a contiguous slice of its own, and claims the
// range it runs next before it runs the current one: fn(range_begin, range_end, next_begin), next_begin
// == end when it has none. Every range runs exactly once; nesting and exceptions as ParallelFor.
void ParallelForClaimAhead(int64_t begin, int64_t end, int64_t grain,
                           const std::function<void(int64_t, int64_t, int64_t)>& fn);

}  // namespace tessel
