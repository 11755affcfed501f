// core/base/parallel.cc — ParallelFor on a small process-wide worker pool, with a thread-local budget.
//
// NOTE: load. On a machine shared with other work a thread may wait a whole time slice to run. An
// OpenMP team ends in a barrier that every member must reach, so one descheduled member stalled every
// op for milliseconds: 1 rank × 2 threads ran up to 15–20× slower than 2 ranks × 1 thread on a small
// model (docs/PERFORMANCE.md). Here the caller cuts [begin, end) into up to kChunksPerThread chunks
// per thread and claims chunks itself; up to NumThreads() - 1 pool workers claim chunks too, each
// from its own segment first and then from the others' (Job: work stealing keeps locality). The call
// returns when every chunk is done, so it waits for a worker only while that worker runs a chunk it
// claimed; a worker that wakes late finds its segment taken and is not waited for. Chunks are
// contiguous ranges of >= grain elements (the last may be shorter), so kernels that index partial
// results by range, not by thread, stay deterministic.
//
// Nesting: while a thread runs a chunk its budget is 1, so a ParallelFor or a GEMM inside `fn` runs
// inline. The pool's threads are std::threads with std::mutex / condition_variable hand-offs, which
// ThreadSanitizer sees (libgomp's barriers it does not). An exception thrown by `fn` in any chunk is
// rethrown to the caller once every chunk has finished (the others still run).
//
// Spinning: a step issues thousands of ParallelFor calls a few microseconds apart, and a futex wake-up
// on a VM costs tens of microseconds, so 1 rank × 2 threads used to lose ~6% of a GPT step to 2 ranks ×
// 1 thread (issue 16). A worker that finishes a job therefore polls the queue for up to kHandOffSpin
// (core/base/spin.h) before it sleeps on the condition variable, and a caller only signals it when it
// sleeps; a caller whose last chunk is still running on a worker polls for as long before it sleeps
// too. Both bounds are short (OpenMP's default KMP_BLOCKTIME spins for 200 ms), so a loaded machine
// loses at most that much CPU per worker per idle period. Workers spin only at start-up and after running a job, so a process whose
// ranks all have a budget of 1 (the threads backend with one rank per core) never wakes them again.
#include "core/base/parallel.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base/spin.h"

namespace tessel {
namespace {

thread_local int num_threads = 0;  // 0 = not set: use hardware concurrency
constexpr int64_t kChunksPerThread = 4;
// One ParallelFor call. The chunks are cut into one contiguous segment per participating thread: the
// caller owns segment 0; a pool worker that joins owns segment w + 1 (w: its pool index) if that exists
// and is free, else the first free one, else none. A thread claims its own segment's chunks from the
// front and, when that is empty, takes other segments' chunks from the back (work stealing). With one
// caller whose budget is every core (one rank per process, the common case), every worker joins every
// call and thread t runs the t-th slice of each: row-parallel ops and row-panel GEMMs keep each row
// range on one core from op to op, the way one rank per core keeps its own batch, instead of fetching
// half their input from the other core's cache (issue 16's threads_vs_ranks). Otherwise slices move
// between workers from call to call; results do not depend on which thread ran a chunk. A
// ParallelForClaimAhead call is the same job with one chunk per `grain` (no kChunksPerThread cap) and
// each chunk's successor claimed before the chunk runs.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  const std::function<void(int64_t, int64_t, int64_t)>* ahead_fn = nullptr;  // ParallelForClaimAhead's
  int64_t begin = 0, end = 0, chunk = 0, chunks = 0;
  struct Segment {
    std::atomic<uint64_t> unclaimed{0};  // chunks [front, back) not yet claimed, as front << 32 | back
    std::atomic<bool> owned{false};      // a thread claims this segment front first
  };
  static constexpr int kInlineSegments = 8;  // no allocation for budgets up to 8 (small ops are µs)
  int segments = 1;
  Segment inline_segments[kInlineSegments];
  std::unique_ptr<Segment[]> heap_segments;
  Segment* seg = inline_segments;
  std::atomic<int64_t> done{0};
  std::atomic<int> helper_slots{0};  // workers that may still join (the budget less the caller)
  std::mutex mu;
  std::condition_variable finished;
  std::exception_ptr error;  // the first exception a chunk threw (guarded by mu); rethrown by the caller

  void Init(int threads) {
    segments = threads;
    if (segments > kInlineSegments) {
      heap_segments = std::make_unique<Segment[]>(segments);
      seg = heap_segments.get();
    }
    seg[0].owned.store(true, std::memory_order_relaxed);  // the caller's
    for (int s = 0; s < segments; ++s) {
      const uint64_t front = static_cast<uint64_t>(chunks * s / segments);
      const uint64_t back = static_cast<uint64_t>(chunks * (s + 1) / segments);
      seg[s].unclaimed.store(front << 32 | back, std::memory_order_relaxed);
    }
  }
  bool HasUnclaimed() const {
    for (int s = 0; s < segments; ++s) {
      const uint64_t v = seg[s].unclaimed.load(std::memory_order_relaxed);
      if ((v >> 32) < (v & 0xffffffffu)) return true;
    }
    return false;
  }
  // Claims segment s's first (own) or last (stolen) unclaimed chunk; -1 when it has none.
  int64_t ClaimFrom(int s, bool own) {
    uint64_t v = seg[s].unclaimed.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = v >> 32, back = v & 0xffffffffu;
      if (front >= back) return -1;
      const uint64_t next = own ? (front + 1) << 32 | back : front << 32 | (back - 1);
      if (seg[s].unclaimed.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
        return static_cast<int64_t>(own ? front : back - 1);
      }
    }
  }
  // The segment a joining worker owns: `preferred` if it exists and is free, else the first free one;
  // -1 (steal only) when every segment has an owner.
  int Adopt(int preferred) {
    if (preferred < segments && !seg[preferred].owned.exchange(true)) return preferred;
    for (int s = 1; s < segments; ++s) {
      if (!seg[s].owned.exchange(true)) return s;
    }
    return -1;
  }
  // `home` is this thread's segment, or -1 to steal only.
  int64_t Claim(int home) {
    if (home >= 0) {
      const int64_t c = ClaimFrom(home, /*own=*/true);
      if (c >= 0) return c;
    }
    for (int i = 1; i <= segments; ++i) {
      const int s = (std::max(home, 0) + i) % segments;
      if (s == home) continue;
      const int64_t c = ClaimFrom(s, /*own=*/false);
      if (c >= 0) return c;
    }
    return -1;
  }

  // Runs chunks until none is left; returns after the chunk that completed the job, if any. With
  // ahead_fn, each chunk's successor is claimed before the chunk runs and named to it.
  void RunChunks(int home) {
    const int saved = num_threads;
    num_threads = 1;  // nested ParallelFor / GEMM calls run inline
    int64_t completed = 0;
    for (int64_t c = Claim(home); c >= 0; ++completed) {
      const int64_t b = begin + c * chunk, e = std::min(end, b + chunk);
      const int64_t next = ahead_fn != nullptr ? Claim(home) : -1;
      try {
        if (ahead_fn != nullptr) {
          (*ahead_fn)(b, e, next >= 0 ? begin + next * chunk : end);
        } else {
          (*fn)(b, e);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
      c = ahead_fn != nullptr ? next : Claim(home);
    }
    num_threads = saved;
    if (completed > 0 && done.fetch_add(completed) + completed == chunks) {
      std::lock_guard<std::mutex> lock(mu);
      finished.notify_all();
    }
  }
};

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool(HardwareConcurrency() - 1);  // never destroyed: workers outlive exit
    return *pool;
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  // Offers `job` to up to `helpers` workers.
  void Offer(const std::shared_ptr<Job>& job, int helpers) {
    int sleeping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(job);
      queued_.store(static_cast<int64_t>(jobs_.size()), std::memory_order_release);
      sleeping = sleeping_;
    }
    // Spinning workers see `queued_`; only sleepers need the (costly) futex wake-up.
    if (sleeping == 0) return;
    if (helpers >= workers()) {
      wake_.notify_all();
    } else {
      for (int i = 0; i < std::min(helpers, sleeping); ++i) wake_.notify_one();
    }
  }

 private:
  explicit Pool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
    for (std::thread& t : threads_) t.detach();
  }

  // The oldest job that still takes helpers (finished or full jobs are dropped); nullptr if none.
  std::shared_ptr<Job> TakeLocked() {
    while (!jobs_.empty()) {
      std::shared_ptr<Job> job = jobs_.front();
      if (job->HasUnclaimed() && job->helper_slots.fetch_sub(1) > 0) {
        if (job->helper_slots.load() <= 0) jobs_.pop_front();
        queued_.store(static_cast<int64_t>(jobs_.size()), std::memory_order_release);
        return job;
      }
      jobs_.pop_front();
    }
    queued_.store(0, std::memory_order_release);
    return nullptr;
  }

  void WorkerLoop(int index) {
    omp_set_num_threads(1);  // any OpenMP code inside a chunk stays on this thread
    for (;;) {
      std::shared_ptr<Job> job;
      if (SpinUntil([&] { return queued_.load(std::memory_order_acquire) > 0; }, kHandOffSpin)) {
        std::lock_guard<std::mutex> lock(mu_);
        job = TakeLocked();
      }
      if (job == nullptr) {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleeping_;
        wake_.wait(lock, [&] { return (job = TakeLocked()) != nullptr; });
        --sleeping_;
      }
      job->RunChunks(job->Adopt(index + 1));
    }
  }

  std::mutex mu_;
  int sleeping_ = 0;                 // workers blocked on wake_ (guarded by mu_)
  std::atomic<int64_t> queued_{0};  // jobs_.size(), readable without mu_ by spinning workers
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::vector<std::thread> threads_;
};

}  // namespace

// The CPUs this process may run on (its affinity mask: taskset, a cgroup cpuset, a launcher's binding),
// counted once, at the first call: std::thread::hardware_concurrency() counts the machine's online CPUs,
// and a budget above the mask time-slices threads on one CPU (each wait spinning on the CPU the others
// need). Later changes to the mask are not seen, as with OpenMP's thread count.
int HardwareConcurrency() {
  static const int cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return cpus;
}

int NumThreads() { return num_threads > 0 ? num_threads : HardwareConcurrency(); }

void SetNumThreads(int n) {
  num_threads = std::max(1, n);
  omp_set_num_threads(num_threads);  // also bounds any OpenMP code (Eigen) on this thread
}

NumThreadsGuard::NumThreadsGuard(int n) : previous_(num_threads) { SetNumThreads(n); }
NumThreadsGuard::~NumThreadsGuard() {
  num_threads = previous_;
  omp_set_num_threads(NumThreads());
}

namespace {

// The body of ParallelFor (fn, at most kChunksPerThread chunks per thread) and of ParallelForClaimAhead
// (ahead_fn, chunks of exactly `grain`).
void RunJob(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>* fn,
            const std::function<void(int64_t, int64_t, int64_t)>* ahead_fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_tasks = (n + grain - 1) / grain;
  Pool& pool = Pool::Get();
  const int threads = static_cast<int>(std::min<int64_t>({NumThreads(), max_tasks, pool.workers() + 1}));
  if (threads <= 1 || omp_in_parallel()) {
    if (fn != nullptr) return (*fn)(begin, end);
    for (int64_t b = begin; b < end; b += grain) {
      const int64_t e = std::min(end, b + grain);
      (*ahead_fn)(b, e, e);
    }
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = fn;
  job->ahead_fn = ahead_fn;
  job->begin = begin;
  job->end = end;
  // (Chunk indices are 32-bit in Segment::unclaimed: at most 2^30 chunks, larger ones past that.)
  job->chunks = std::min<int64_t>(max_tasks, fn != nullptr ? threads * kChunksPerThread : int64_t{1} << 30);
  job->chunk = (n + job->chunks - 1) / job->chunks;
  job->chunks = (n + job->chunk - 1) / job->chunk;  // no empty trailing chunk
  job->Init(threads);
  job->helper_slots = threads - 1;
  pool.Offer(job, threads - 1);
  job->RunChunks(/*home=*/0);
  // A worker still runs its last chunk (a bounded piece of this call's work): poll before sleeping.
  if (!SpinUntil([&] { return job->done.load(std::memory_order_acquire) == job->chunks; }, kHandOffSpin)) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->finished.wait(lock, [&] { return job->done.load() == job->chunks; });
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(job->mu);  // orders `error` (written under mu) before the read
    // Moved out: a worker may drop the last reference to `job`, and the exception must be released on
    // this thread, which rethrows it (ThreadSanitizer cannot see libstdc++'s exception refcount).
    error = std::move(job->error);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  RunJob(begin, end, grain, &fn, nullptr);
}

void ParallelForClaimAhead(int64_t begin, int64_t end, int64_t grain,
                           const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  RunJob(begin, end, grain, nullptr, &fn);
}

}  // namespace tessel
