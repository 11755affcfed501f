// comm/comm_thread.h — CommThread: one FIFO worker thread that runs a group's collectives.
//
// Invariant: tasks run one at a time, in the order they were enqueued, each with the device
// (DeviceGuard) and intra-op thread budget (NumThreadsGuard) fixed at construction. A task runs on the
// worker thread, or on a thread that waits for its Work while it is still queued (caller-runs: Wait()
// runs the queued tasks up to its own, oldest first, whenever no other task is running). Either way the
// order is the enqueue order and no two tasks overlap. The destructor runs every task already enqueued,
// then joins (tasks must not block forever: backends bound every wait by a timeout or an abort).
//
// Why caller-runs: a collective that is waited for at once (most of TP's) would otherwise cost two
// thread hand-offs (wake the worker, then wake the waiter) on top of the rendezvous with the peers;
// issued and waited for later (FSDP's prefetch), it still overlaps with the caller's compute.
//
// A caller that waits for its Work at once can also spare the first hand-off: inside a
// SubmitForImmediateWait scope, Submit queues without waking the worker (a futex wake-up that, on a
// machine with as many busy rank threads as cores, also preempts a peer rank's compute), and the Wait()
// that follows runs the task itself. If the worker is busy with an earlier task it picks the new one up
// as it finishes (it re-checks the queue before sleeping), so the order is unchanged. The scope's end
// wakes the worker of every queue still holding a task queued so (the caller threw before its Wait), and
// so does a Wait() on another queue's Work: a collective the peers wait for never sits unrun.
//
// Example:
//   CommThread thread(/*num_threads=*/1, Device::Cpu(rank));
//   WorkPtr work = thread.Submit([=] { RunAllReduce(); });   // errors land in the Work
//   {
//     SubmitForImmediateWait scope;
//     thread.Submit([=] { RunAllGather(); })->Wait();       // runs on this thread, worker left asleep
//   }
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/work.h"
#include "core/tensor/device.h"

namespace tessel::comm {

class CommThread {
 public:
  CommThread(int num_threads, Device device);
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Runs `body` (on the thread, or on the Work's waiter); its exception (if any) is rethrown by the
  // returned Work's Wait().
  WorkPtr Submit(std::function<void()> body);
  // True while a submitted body is queued or running.
  bool busy() const { return pending_->load() > 0; }
  // Test-only: the worker is blocked waiting for a task (a Submit now must wake it to be run by it).
  bool WorkerAsleepForTesting() const;

  // The queue shared by the worker and the waiters (comm_thread.cc; it outlives this object while a
  // Work refers to it).
  class Queue;

 private:
  std::shared_ptr<Queue> queue_;
  std::shared_ptr<std::atomic<int>> pending_;
  std::thread thread_;
};

// A CommThread made on first use: a group's point-to-point thread (most groups never send or receive). Sends and
// receives run on it, in their issue order, so that one waiting for its peer does not hold up the group's
// collectives queued after it (torch: isend, then all_reduce, then the peer's irecv completes).
// Thread-safe; Reset() runs what is queued and joins, as ~CommThread.
class LazyCommThread {
 public:
  LazyCommThread(int num_threads, Device device) : num_threads_(num_threads), device_(device) {}
  CommThread& Get();
  bool busy() const;  // false until made
  void Reset();

 private:
  const int num_threads_;
  const Device device_;
  mutable std::mutex mu_;
  std::unique_ptr<CommThread> thread_;
};

// While alive, Submit calls made by this thread do not wake the worker (see the header comment); the
// thread must Wait() for those Works before the scope ends (the destructor wakes the worker of any queue
// still holding one). Scopes nest.
class SubmitForImmediateWait {
 public:
  SubmitForImmediateWait();
  ~SubmitForImmediateWait();
  SubmitForImmediateWait(const SubmitForImmediateWait&) = delete;
  SubmitForImmediateWait& operator=(const SubmitForImmediateWait&) = delete;
};

}  // namespace tessel::comm
