// comm/future_work.cc — FutureWork.
#include "comm/future_work.h"

#include <memory>

namespace tessel::comm {

void FutureWork::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (failed_) throw Error(code_, message_);
}

bool FutureWork::IsCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void FutureWork::MarkCompleted() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void FutureWork::MarkFailed(std::exception_ptr error) {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    code = e.code(), message = e.what();
  } catch (const std::exception& e) {
    message = Str("unexpected exception on a communication thread: ", e.what(), " (this is a tessel bug; please report it)");
  } catch (...) {
    message = "unknown exception on a communication thread (this is a tessel bug; please report it)";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    code_ = code;
    message_ = std::move(message);
    done_ = true;
  }
  cv_.notify_all();
}

WorkPtr CompletedWork() {
  auto work = std::make_shared<FutureWork>();
  work->MarkCompleted();
  return work;
}

}  // namespace tessel::comm
