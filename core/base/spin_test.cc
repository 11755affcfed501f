// Tests of core/base/spin.h: bounded polling returns as soon as the state is ready, gives up after its
// budget, and SpinUnderLock holds the lock whenever it evaluates `ready` and on return.
#include "core/base/spin.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace tessel {
namespace {

using std::chrono::microseconds;
using Clock = std::chrono::steady_clock;

TEST(SpinTest, SpinUntilGivesUpAfterItsBudgetAndAZeroBudgetChecksOnce) {
  int calls = 0;
  const auto t0 = Clock::now();
  EXPECT_FALSE(SpinUntil([&] { return ++calls < 0; }, microseconds(2000)));
  EXPECT_GE(Clock::now() - t0, microseconds(2000));
  EXPECT_GT(calls, 1);
  calls = 0;
  EXPECT_FALSE(SpinUntil([&] { return ++calls < 0; }, microseconds(0)));
  EXPECT_EQ(calls, 1);
}

TEST(SpinTest, SpinUntilSeesAnotherThreadsStoreWithinTheBudget) {
  std::atomic<bool> ready{false};
  std::thread writer([&] { ready.store(true, std::memory_order_release); });
  EXPECT_TRUE(SpinUntil([&] { return ready.load(std::memory_order_acquire); }, microseconds(2'000'000)));
  writer.join();
}

TEST(SpinTest, SpinUnderLockEvaluatesUnderTheLockAndReturnsHoldingIt) {
  std::mutex mu;
  std::atomic<uint64_t> changes{0};
  int state = 0;  // guarded by mu
  std::unique_lock<std::mutex> lock(mu);
  std::thread writer([&] {
    for (int i = 1; i <= 3; ++i) {
      std::lock_guard<std::mutex> g(mu);
      state = i;
      changes.fetch_add(1, std::memory_order_release);
    }
  });
  const bool ok = SpinUnderLock(
      lock,
      [&] {
        EXPECT_TRUE(lock.owns_lock());
        return state == 3;
      },
      changes, microseconds(2'000'000));
  EXPECT_TRUE(ok);
  EXPECT_TRUE(lock.owns_lock());
  EXPECT_EQ(state, 3);
  lock.unlock();
  writer.join();
  lock.lock();  // nothing changes any more: false after the budget, still holding the lock
  EXPECT_FALSE(SpinUnderLock(lock, [&] { return state == 4; }, changes, microseconds(1000)));
  EXPECT_TRUE(lock.owns_lock());
}

}  // namespace
}  // namespace tessel
