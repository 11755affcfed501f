// core/base/parallel.cc — OpenMP-backed ParallelFor with a thread-local budget.
//
// NOTE: load. On a machine shared with other work, one thread of a team may be descheduled for a
// whole time slice. With one static range per thread the team then waits that long at the join, so
// 1 rank × 2 threads ran slower than 2 ranks × 1 thread (docs/PERFORMANCE.md). ParallelFor therefore
// cuts the range into up to kChunksPerThread chunks per thread, handed out first come first served
// (schedule(dynamic)): a running thread takes the chunks of a descheduled one, and the join waits for
// at most one chunk. Chunks are still contiguous ranges of >= grain elements, so kernels that index
// partial results by range (not by thread) stay deterministic.
#include "core/base/parallel.h"

#include <omp.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace tessel {
namespace {
thread_local int num_threads = 0;  // 0 = not set: use hardware concurrency
constexpr int64_t kChunksPerThread = 4;
}  // namespace

int HardwareConcurrency() { return std::max(1u, std::thread::hardware_concurrency()); }

int NumThreads() { return num_threads > 0 ? num_threads : HardwareConcurrency(); }

void SetNumThreads(int n) {
  num_threads = std::max(1, n);
  omp_set_num_threads(num_threads);  // also bounds Eigen's OpenMP GEMM on this thread
}

NumThreadsGuard::NumThreadsGuard(int n) : previous_(num_threads) { SetNumThreads(n); }
NumThreadsGuard::~NumThreadsGuard() {
  num_threads = previous_;
  omp_set_num_threads(NumThreads());
}

void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_tasks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(NumThreads(), max_tasks));
  if (threads <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot see libgomp's (uninstrumented) barriers and reports every hand-off of data
  // through an OpenMP team as a race. Under TSan the same split runs on std::threads, whose start and
  // join it does see, so races inside `fn` are still found and the team's hand-offs are not reported.
  const int64_t per = (n + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    const int64_t b = begin + t * per;
    const int64_t e = std::min(end, b + per);
    if (b < e) workers.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(begin, std::min(end, begin + per));
  for (std::thread& w : workers) w.join();
#else
  const int64_t chunks = std::min<int64_t>(max_tasks, threads * kChunksPerThread);
  const int64_t chunk = (n + chunks - 1) / chunks;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = begin + c * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) fn(b, e);
  }
#endif
}

}  // namespace tessel
