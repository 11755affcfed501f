// comm/comm_thread.cc — CommThread.
#include "comm/comm_thread.h"

#include <exception>
#include <utility>

#include "comm/future_work.h"
#include "core/base/parallel.h"

namespace tessel::comm {

CommThread::CommThread(int num_threads, Device device)
    : thread_([this, num_threads, device] { Loop(num_threads, device); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

WorkPtr CommThread::Submit(std::function<void()> body) {
  auto work = std::make_shared<FutureWork>();
  pending_.fetch_add(1);
  auto task = [this, work, body = std::move(body)]() mutable {
    std::exception_ptr error;
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    // Drop what the body captured (the call's tensors) before the waiter wakes: once Wait() returns,
    // the backend holds no reference, so a buffer the caller drops is freed at once, not whenever this
    // thread gets to it (memory peaks would otherwise depend on thread timing).
    body = nullptr;
    pending_.fetch_sub(1);  // before the waiter wakes, so its unwinding sees nothing pending
    if (error) {
      work->MarkFailed(error);
    } else {
      work->MarkCompleted();
    }
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return work;
}

void CommThread::Loop(int num_threads, Device device) {
  DeviceGuard device_guard(device);
  NumThreadsGuard threads_guard(num_threads);
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace tessel::comm
