// core/ops/dnnl_common.h — internal to core/ops: what every oneDNN caller here shares (gemm_dnnl.cc,
// conv.cc): the one CPU engine and the OpenMP cap.
//
// Invariant: oneDNN work runs on the calling thread only. Debian builds oneDNN on OpenMP; a caller
// holds OneOmpThread while it executes primitives, so no libgomp team spins against tessel's worker
// pool (core/base/parallel.h), which stays the only parallelism: callers split their work over it.
//
// Example:
//   const OneOmpThread one_thread;
//   prim.execute(stream, args);
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace tessel {

// The process's oneDNN CPU engine.
const dnnl::engine& DnnlEngine();

// Caps the calling thread's OpenMP team at one thread while in scope.
class OneOmpThread {
 public:
  OneOmpThread();
  ~OneOmpThread();
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

}  // namespace tessel
