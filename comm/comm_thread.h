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
// Example:
//   CommThread thread(/*num_threads=*/1, Device::Cpu(rank));
//   WorkPtr work = thread.Submit([=] { RunAllReduce(); });   // errors land in the Work
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

  // The queue shared by the worker and the waiters (comm_thread.cc; it outlives this object while a
  // Work refers to it).
  class Queue;

 private:
  std::shared_ptr<Queue> queue_;
  std::shared_ptr<std::atomic<int>> pending_;
  std::thread thread_;
};

}  // namespace tessel::comm
