// comm/comm_thread.h — CommThread: one FIFO worker thread that runs a group's collectives.
//
// Invariant: tasks run one at a time, in the order they were enqueued, on a thread whose device
// (DeviceGuard) and intra-op thread budget (NumThreadsGuard) were fixed at construction. The
// destructor runs every task already enqueued, then joins (tasks must not block forever: backends
// bound every wait by a timeout or an abort).
//
// Example:
//   CommThread thread(/*num_threads=*/1, Device::Cpu(rank));
//   WorkPtr work = thread.Submit([=] { RunAllReduce(); });   // errors land in the Work
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
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

  // Runs `body` on the thread; its exception (if any) is rethrown by the returned Work's Wait().
  WorkPtr Submit(std::function<void()> body);
  // True while a submitted body is queued or running.
  bool busy() const { return pending_.load() > 0; }

 private:
  void Loop(int num_threads, Device device);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::atomic<int> pending_{0};
  std::thread thread_;
};

}  // namespace tessel::comm
