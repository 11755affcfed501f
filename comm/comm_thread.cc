// comm/comm_thread.cc — CommThread: its queue (shared with the Works it returned) and the worker loop.
#include "comm/comm_thread.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "comm/future_work.h"
#include "core/base/parallel.h"

namespace tessel::comm {

class CommThread::Queue {
 public:
  Queue(int num_threads, Device device) : num_threads_(num_threads), device_(device) {}

  // wake_worker false: the caller will Wait() for the task at once (SubmitForImmediateWait).
  int64_t Push(std::function<void()> run, bool wake_worker) {
    int64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = next_id_++;
      tasks_.push_back(Task{id, std::move(run)});
    }
    if (wake_worker) task_cv_.notify_one();  // the worker (waiters wait for a running task to end, not for new ones)
    return id;
  }

  // Wakes the worker when a task is queued and none runs (a task pushed without a wake-up that its
  // caller did not wait for).
  void WakeIfQueued() {
    bool queued;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued = !tasks_.empty() && !running_;
    }
    if (queued) task_cv_.notify_one();
  }

  // The worker: runs tasks as they come until stopped and drained.
  void Loop() {
    DeviceGuard device_guard(device_);
    NumThreadsGuard threads_guard(num_threads_);
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      while (running_ || (!stopping_ && tasks_.empty())) {
        worker_asleep_ = true;
        task_cv_.wait(lock);
        worker_asleep_ = false;
      }
      if (tasks_.empty()) return;  // stopping and drained
      RunFront(lock);
    }
  }

  // A waiter: runs the queued tasks up to and including `id` on the calling thread (taking turns with
  // the worker); returns once task `id` is no longer queued (done, or running on another thread).
  void RunUpTo(int64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      idle_cv_.wait(lock, [&] { return !running_ || tasks_.empty() || tasks_.front().id > id; });
      if (tasks_.empty() || tasks_.front().id > id) return;
      DeviceGuard device_guard(device_);
      NumThreadsGuard threads_guard(num_threads_);
      RunFront(lock);
    }
  }

  bool WorkerAsleep() {
    std::lock_guard<std::mutex> lock(mu_);
    return worker_asleep_;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    task_cv_.notify_all();
  }

 private:
  struct Task {
    int64_t id;
    std::function<void()> run;
  };

  // REQUIRES: `lock` held, a task queued, none running. Runs the oldest task without the lock.
  void RunFront(std::unique_lock<std::mutex>& lock) {
    std::function<void()> run = std::move(tasks_.front().run);
    tasks_.pop_front();
    running_ = true;
    lock.unlock();
    run();  // never throws: Submit's wrapper catches
    run = nullptr;
    lock.lock();
    running_ = false;
    idle_cv_.notify_all();
    // The worker sleeps until a task is queued and none runs: wake it only if one is (a waiter that ran
    // its own collective leaves the queue empty, and a wake-up then would only cost the worker's core).
    if (!tasks_.empty() || stopping_) task_cv_.notify_one();
  }

  const int num_threads_;
  const Device device_;
  std::mutex mu_;
  std::condition_variable task_cv_;  // the worker: a task queued (and none running), or stopping
  std::condition_variable idle_cv_;  // waiters: the running task ended
  std::deque<Task> tasks_;
  int64_t next_id_ = 0;
  bool running_ = false;  // a task is running (on the worker or on a waiter)
  bool stopping_ = false;
  bool worker_asleep_ = false;  // the worker waits on task_cv_ (the lock released)
};

namespace {

// This thread's SubmitForImmediateWait scopes: their depth and the queues it pushed to without a wake-up.
struct ImmediateWaitScopes {
  int depth = 0;
  std::vector<std::shared_ptr<CommThread::Queue>> queues;
};
thread_local ImmediateWaitScopes immediate_wait;

// Before this thread blocks on a Work of `keep`, the other queues it deferred wake-ups on get their worker
// woken: a caller that submits on group A and then waits on group B first must not leave A's task unrun.
void WakeOtherDeferredQueues(const CommThread::Queue* keep) {
  std::vector<std::shared_ptr<CommThread::Queue>>& queues = immediate_wait.queues;
  for (auto it = queues.begin(); it != queues.end();) {
    if (it->get() == keep) {
      ++it;
      continue;
    }
    (*it)->WakeIfQueued();
    it = queues.erase(it);
  }
}

// The Work of a queued task: waiting for it first runs it (and what is queued before it) on the
// waiter's thread when no other thread is running a task.
class QueuedWork final : public FutureWork {
 public:
  explicit QueuedWork(std::shared_ptr<CommThread::Queue> queue) : queue_(std::move(queue)) {}
  void set_id(int64_t id) { id_ = id; }
  void Wait() override {
    if (!IsCompleted()) {
      WakeOtherDeferredQueues(queue_.get());
      queue_->RunUpTo(id_);
    }
    FutureWork::Wait();
  }

 private:
  const std::shared_ptr<CommThread::Queue> queue_;
  int64_t id_ = -1;
};

}  // namespace

CommThread::CommThread(int num_threads, Device device)
    : queue_(std::make_shared<Queue>(num_threads, device)),
      pending_(std::make_shared<std::atomic<int>>(0)),
      thread_([queue = queue_] { queue->Loop(); }) {}

CommThread::~CommThread() {
  queue_->Stop();
  thread_.join();
}

WorkPtr CommThread::Submit(std::function<void()> body) {
  auto work = std::make_shared<QueuedWork>(queue_);
  pending_->fetch_add(1);
  // The task holds the Work weakly: a Work dropped unwaited does not keep itself alive through the
  // queue it refers to.
  auto task = [pending = pending_, weak = std::weak_ptr<QueuedWork>(work), body = std::move(body)]() mutable {
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
    pending->fetch_sub(1);  // before the waiter wakes, so its unwinding sees nothing pending
    const std::shared_ptr<QueuedWork> w = weak.lock();
    if (!w) return;
    if (error) {
      w->MarkFailed(error);
    } else {
      w->MarkCompleted();
    }
  };
  const bool defer = immediate_wait.depth > 0;
  if (defer) {
    std::vector<std::shared_ptr<Queue>>& queues = immediate_wait.queues;
    if (std::find(queues.begin(), queues.end(), queue_) == queues.end()) queues.push_back(queue_);
  }
  work->set_id(queue_->Push(std::move(task), /*wake_worker=*/!defer));
  return work;
}

bool CommThread::WorkerAsleepForTesting() const { return queue_->WorkerAsleep(); }

SubmitForImmediateWait::SubmitForImmediateWait() { ++immediate_wait.depth; }

SubmitForImmediateWait::~SubmitForImmediateWait() {
  if (--immediate_wait.depth > 0) return;
  std::vector<std::shared_ptr<CommThread::Queue>> queues = std::move(immediate_wait.queues);
  immediate_wait.queues.clear();
  for (const std::shared_ptr<CommThread::Queue>& q : queues) q->WakeIfQueued();
}

CommThread& LazyCommThread::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_ == nullptr) thread_ = std::make_unique<CommThread>(num_threads_, device_);
  return *thread_;
}

bool LazyCommThread::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_ != nullptr && thread_->busy();
}

void LazyCommThread::Reset() {
  std::unique_ptr<CommThread> thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    thread = std::move(thread_);
  }
  thread.reset();  // outside the lock: its queued tasks may still run
}

}  // namespace tessel::comm
