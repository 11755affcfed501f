// comm/work.h — Work: the handle of an issued (possibly still running) collective.
//
// Invariant: Wait() returns once the collective finished on this rank and its output tensors hold
// the result, or rethrows (on the caller's thread) the tessel::Error raised on the comm thread.
// Waiting twice is fine; the second wait returns (or rethrows) immediately. BlockStream(stream) orders
// the collective before later work on a device stream instead of blocking the host where the backend
// can (NCCL); backends that run on the host just Wait().
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
  // Work queued on `stream` (a memory::StreamHandle of the collective's device) after this call runs
  // after the collective, without blocking the host where the backend can; default: Wait().
  virtual void BlockStream(void* /*stream*/) { Wait(); }
  // The group rank whose send an any-source receive (ProcessGroup::RecvAnySource) took, once Wait()
  // returned; -1 for any other work.
  virtual int SourceRank() { return -1; }
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tessel::comm
