// core/base/spin.h — bounded busy-waiting before a blocking wait, for hand-offs between threads that
// each have a core (intra-op workers, rank threads of the threads backend).
//
// Why: a futex sleep and wake-up costs tens of microseconds on a VM, while the ops and collectives of a
// small model's step are a few microseconds apart. Polling for a bounded time first turns most hand-offs
// into a cache-line transfer; past the budget the caller blocks as before, so an idle thread costs at
// most `budget` of CPU per wait (OpenMP's default KMP_BLOCKTIME spins for 200 ms).
//
// Example:
//   if (!SpinUntil([&] { return done.load(std::memory_order_acquire); }, kHandOffSpin)) cv.wait(lock, ...);
//   SpinUnderLock(lock, [&] { return slot.arrived == world; }, kHandOffSpin);  // then cv.wait_until(...)
#pragma once

#include <atomic>
#include <chrono>
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

// The same for state guarded by `lock`'s mutex: `ready` runs with the lock held, which is released
// between polls so the threads that change the state can take it. Held on entry and on return.
template <typename Ready>
bool SpinUnderLock(std::unique_lock<std::mutex>& lock, const Ready& ready, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    lock.unlock();
    for (int k = 0; k < 16; ++k) CpuRelax();
    lock.lock();
    if (i % 8 == 0 && std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace tessel
