// core/dispatch/profiler.h — OpProfiler: per-op wall time and call counts for the calling thread.
//
// Invariant: while an OpProfiler is alive on a thread, every local kernel dispatched on that thread
// (DispatchLocal) adds its wall time and one call to the op's row; nothing is recorded otherwise
// (the disabled cost is one thread-local load per dispatch). Constructed with a device synchronization
// (e.g. cudaDeviceSynchronize), it runs it before and after each kernel, so an asynchronous device op's
// row holds its device time, not its launch's (the profile perturbs the step it measures).
//
// Example:
//   OpProfiler prof;
//   RunOneTrainingStep();
//   std::cout << prof.Table();    // op, calls, total ms, share — slowest first
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace tessel {

class OpProfiler {
 public:
  OpProfiler();
  // by_shape: one row per op and input shapes ("matmul [8192, 768] bfloat16, ...") instead of per op.
  explicit OpProfiler(std::function<void()> device_sync, bool by_shape = false);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  struct Row {
    int64_t calls = 0;
    double seconds = 0;
  };
  const std::map<std::string, Row>& rows() const { return rows_; }
  std::string Table() const;

  // Called by the dispatcher.
  static OpProfiler* Current();
  void Add(const std::string& op, double seconds);
  // Waits for the device's queued work when constructed with a device synchronization, else nothing.
  void SyncDevice() const {
    if (device_sync_) device_sync_();
  }
  bool by_shape() const { return by_shape_; }

 private:
  std::map<std::string, Row> rows_;
  std::function<void()> device_sync_;
  bool by_shape_ = false;
  OpProfiler* previous_;
};

}  // namespace tessel
