// CommThread: FIFO order and no overlap whoever runs a task (the worker or a waiter, caller-runs), the
// device and thread budget every task sees, errors through the Work, and drain-on-destruction.
#include "comm/comm_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/base/testing/expect_error.h"

namespace tessel::comm {
namespace {

TEST(CommThreadTest, TasksRunInSubmitOrderWithoutOverlapWhileTwoThreadsWaitOutOfOrder) {
  constexpr int kTasks = 400;
  CommThread thread(1, Device::Cpu(0));
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::mutex mu;
  std::vector<int> order;
  std::vector<WorkPtr> works;
  for (int i = 0; i < kTasks; ++i) {
    works.push_back(thread.Submit([&, i] {
      if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      running.fetch_sub(1);
    }));
  }
  // Two waiters from the back and the middle: whoever runs a task, the order stays the submit order.
  std::thread back([&] {
    for (int i = kTasks - 1; i >= 0; i -= 7) works[i]->Wait();
  });
  for (int i = kTasks / 2; i < kTasks; i += 3) works[i]->Wait();
  back.join();
  for (const WorkPtr& w : works) w->Wait();
  EXPECT_EQ(overlaps.load(), 0);
  ASSERT_EQ(order.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(order[i], i) << "position " << i;
}

TEST(CommThreadTest, EveryTaskSeesTheThreadsDeviceAndBudgetAndTheWaiterGetsItsOwnBack) {
  CommThread thread(3, Device::Cpu(2));
  DeviceGuard waiter_device(Device::Cpu(5));
  NumThreadsGuard waiter_budget(7);
  for (int i = 0; i < 50; ++i) {
    Device seen_device = Device::Cpu(0);
    int seen_threads = 0;
    thread.Submit([&] {
      seen_device = CurrentDevice();
      seen_threads = NumThreads();
    })->Wait();
    EXPECT_EQ(seen_device, Device::Cpu(2));
    EXPECT_EQ(seen_threads, 3);
    EXPECT_EQ(CurrentDevice(), Device::Cpu(5));
    EXPECT_EQ(NumThreads(), 7);
  }
}

TEST(CommThreadTest, AnErrorReachesOnlyItsOwnWorkAndLaterTasksStillRun) {
  CommThread thread(1, Device::Cpu(0));
  WorkPtr failing = thread.Submit([] { TESSEL_FAIL(ErrorCode::kAborted, "peer 3 vanished"); });
  int ran = 0;
  WorkPtr next = thread.Submit([&] { ++ran; });
  next->Wait();
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(failing->IsCompleted());
  testing::ExpectErrorContains([&] { failing->Wait(); }, ErrorCode::kAborted, "peer 3 vanished");
}

TEST(CommThreadTest, DestructionRunsEveryQueuedTaskEvenIfNobodyWaits) {
  std::atomic<int> ran{0};
  std::vector<WorkPtr> works;
  {
    CommThread thread(1, Device::Cpu(0));
    for (int i = 0; i < 100; ++i) works.push_back(thread.Submit([&] { ran.fetch_add(1); }));
    EXPECT_TRUE(thread.busy() || ran.load() == 100);
  }
  EXPECT_EQ(ran.load(), 100);
  for (const WorkPtr& w : works) EXPECT_TRUE(w->IsCompleted());
}

// Tasks queued behind one a waiter runs still reach the worker: nobody waits for B and C, yet they run
// (the worker is woken when the waiter's task ends and the queue is not empty).
TEST(CommThreadTest, TasksQueuedBehindACallerRunTaskRunWithoutAnyoneWaiting) {
  CommThread thread(1, Device::Cpu(0));
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  // The worker runs X, which blocks, so A, B and C queue up behind it.
  WorkPtr x = thread.Submit([&] {
    while (!release.load()) std::this_thread::yield();
  });
  WorkPtr a = thread.Submit([&] { ran.fetch_add(1); });
  WorkPtr b = thread.Submit([&] { ran.fetch_add(10); });
  WorkPtr c = thread.Submit([&] { ran.fetch_add(100); });
  std::thread waiter([&] { a->Wait(); });  // once X ends, A may run on this waiter
  release.store(true);
  waiter.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(b->IsCompleted() && c->IsCompleted()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(b->IsCompleted());
  EXPECT_TRUE(c->IsCompleted());
  EXPECT_EQ(ran.load(), 111);
}

// Polls until the worker is blocked waiting for a task (it starts, and finishes a task, awake).
void WaitForWorkerAsleep(const CommThread& thread) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!thread.WorkerAsleepForTesting() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(thread.WorkerAsleepForTesting());
}

// Polls until `w` completes or 10 s pass.
bool CompletesWithinTenSeconds(const WorkPtr& w) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!w->IsCompleted() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return w->IsCompleted();
}

// Inside the scope the idle worker is not woken: 50 ms later the task has not run, and Wait() runs it on
// the waiter. The control (no scope) shows that the worker, woken, runs the same task by itself.
TEST(CommThreadTest, InsideAnImmediateWaitScopeTheWaiterRunsItsTaskAndTheIdleWorkerStaysAsleep) {
  CommThread thread(1, Device::Cpu(0));
  std::thread::id ran_on;
  auto record = [&] { ran_on = std::this_thread::get_id(); };
  WaitForWorkerAsleep(thread);
  {
    SubmitForImmediateWait scope;
    WorkPtr w = thread.Submit(record);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(w->IsCompleted());
    EXPECT_TRUE(thread.busy());  // queued, not run
    w->Wait();
  }
  EXPECT_EQ(ran_on, std::this_thread::get_id());

  WorkPtr control = thread.Submit(record);
  ASSERT_TRUE(CompletesWithinTenSeconds(control));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// A caller that leaves the scope without waiting (it threw, say) does not strand its task: the scope's
// end wakes the worker, which runs it and what was queued after it.
TEST(CommThreadTest, LeavingAnImmediateWaitScopeWithoutWaitingWakesTheWorker) {
  CommThread thread(1, Device::Cpu(0));
  std::atomic<int> ran{0};
  WorkPtr a, b;
  WaitForWorkerAsleep(thread);
  {
    SubmitForImmediateWait outer;
    {
      SubmitForImmediateWait inner;  // nested: only the outermost scope's end wakes
      a = thread.Submit([&] { ran.fetch_add(1); });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(a->IsCompleted());
    b = thread.Submit([&] { ran.fetch_add(10); });
  }
  EXPECT_TRUE(CompletesWithinTenSeconds(a));
  EXPECT_TRUE(CompletesWithinTenSeconds(b));
  EXPECT_EQ(ran.load(), 11);
}

// A worker busy with an earlier task picks up a task queued without a wake-up as soon as it finishes,
// in order, even if the caller has not waited yet.
TEST(CommThreadTest, ABusyWorkerRunsTasksQueuedInAnImmediateWaitScopeInOrder) {
  CommThread thread(1, Device::Cpu(0));
  std::atomic<bool> release{false};
  std::mutex mu;
  std::vector<int> order;
  WorkPtr x = thread.Submit([&] {
    while (!release.load()) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(0);
  });
  SubmitForImmediateWait scope;
  WorkPtr a = thread.Submit([&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  release.store(true);
  EXPECT_TRUE(CompletesWithinTenSeconds(a));  // nobody waited: the worker ran it after X
  a->Wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
}

// Inside a scope a caller submits on thread A, then waits on thread B's Work first, whose task needs A's
// to have run (peers blocked in A's collective would): the Wait on B wakes A's worker, so both finish.
TEST(CommThreadTest, WaitingOnAnotherQueueInsideAnImmediateWaitScopeWakesTheFirstQueuesWorker) {
  CommThread a(1, Device::Cpu(0)), b(1, Device::Cpu(0));
  WaitForWorkerAsleep(a);
  std::atomic<bool> a_ran{false};
  bool b_saw_a = false;
  SubmitForImmediateWait scope;
  WorkPtr wa = a.Submit([&] { a_ran.store(true); });
  WorkPtr wb = b.Submit([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!a_ran.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    b_saw_a = a_ran.load();
  });
  wb->Wait();
  EXPECT_TRUE(b_saw_a);
  wa->Wait();
}

}  // namespace
}  // namespace tessel::comm
