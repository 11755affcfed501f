// comm/future_work.h — FutureWork: the Work a backend completes from its communication thread.
//
// Invariant: a FutureWork moves once from pending to either completed or failed; Wait() blocks until
// then and, if it failed, throws on the caller's thread a tessel::Error with the code and message of
// the error raised on the comm thread (any other exception becomes kInternal), every time it is
// called. NOTE: it throws a fresh copy rather than the comm thread's exception object, so no
// exception object is shared between threads (libstdc++'s exception_ptr refcount is invisible to
// ThreadSanitizer, which would report its release as a race).
//
// Example (backend side):
//   auto work = std::make_shared<FutureWork>();
//   comm_thread.Enqueue([work] { try { Run(); work->MarkCompleted(); }
//                                catch (...) { work->MarkFailed(std::current_exception()); } });
//   return work;
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "core/base/error.h"

#include "comm/work.h"

namespace tessel::comm {

class FutureWork : public Work {
 public:
  void Wait() override;
  bool IsCompleted() override;

  void MarkCompleted();
  void MarkFailed(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool failed_ = false;
  ErrorCode code_ = ErrorCode::kInternal;
  std::string message_;
};

// A Work that is already complete (world size 1, empty transfers).
WorkPtr CompletedWork();

}  // namespace tessel::comm
