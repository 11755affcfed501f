// core/base/spin.h — bounded busy-waiting before a blocking wait, for hand-offs between threads that
// each have a core (intra-op workers, rank threads of the threads backend).
//
// Why: a futex sleep and wake-up costs tens of microseconds on a VM, while the ops and collectives of a
// small model's step are a few microseconds apart. Polling for a bounded time first turns most hand-offs
// into a cache-line transfer; past the budget the caller blocks as before, so an idle thread costs at
// most `budget` of CPU per wait (OpenMP's default KMP_BLOCKTIME spins for 200 ms).
//
// Invariant: header-only and ISA-neutral; do not include it in a -mavx512* translation unit (CpuRelax and
// the templates are shared inline definitions the linker may pick from any one of them).
//
// Example:
//   if (!SpinUntil([&] { return done.load(std::memory_order_acquire); }, kHandOffSpin)) cv.wait(lock, ...);
//   SpinUnderLock(lock, [&] { return slot.arrived == world; }, changes_, kHandOffSpin);  // then cv.wait_until
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessel {

// How long a hand-off polls before it sleeps.
inline constexpr std::chrono::microseconds kHandOffSpin{200};

// One polite pause in a spin loop (PAUSE on x86: yields the core's pipeline to its sibling thread).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// Polls `ready` until it returns true or `budget` has passed; returns its last value.
template <typename Ready>
bool SpinUntil(const Ready& ready, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    CpuRelax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

// The same for state guarded by `lock`'s mutex, whose writers bump `changes` (release) on every change a
// waiter may care about: `ready` runs with the lock held; between checks the lock is released and this
// thread polls only `changes`, so it never makes a writer block on the mutex (polling by re-locking
// would). Held on entry and on return.
template <typename Ready>
bool SpinUnderLock(std::unique_lock<std::mutex>& lock, const Ready& ready, const std::atomic<uint64_t>& changes,
                   std::chrono::microseconds budget) {
  if (budget.count() <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (!ready()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const uint64_t seen = changes.load(std::memory_order_acquire);
    lock.unlock();
    SpinUntil([&] { return changes.load(std::memory_order_acquire) != seen; }, left);
    // The writer bumps `changes` while it still holds the mutex: poll try_lock for a while rather than
    // sleeping in the kernel on it (which would cost the writer a futex wake-up when it unlocks).
    for (int i = 0; !lock.try_lock(); ++i) {
      if (i == 4096) {
        lock.lock();
        break;
      }
      CpuRelax();
    }
  }
  return true;
}

}  // namespace tessel
