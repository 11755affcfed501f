// comm/work.h — Work: the handle of an issued (possibly still running) collective.
//
// Invariant: Wait() returns once the collective finished on this rank and its output tensors hold
// the result, or rethrows (on the caller's thread) the tessel::Error raised on the comm thread.
// Waiting twice is fine; the second wait returns (or rethrows) immediately.
//
// Example:
//   WorkPtr w = pg->AllGather(out, in);
//   if (!w->IsCompleted()) DoOtherWork();
//   w->Wait();
#pragma once

#include <memory>

namespace tessel::comm {

class Work {
 public:
  virtual ~Work() = default;
  virtual void Wait() = 0;
  virtual bool IsCompleted() = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tessel::comm
