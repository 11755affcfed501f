// core/dispatch/profiler.h — OpProfiler: per-op wall time and call counts for the calling thread.
//
// Invariant: while an OpProfiler is alive on a thread, every local kernel dispatched on that thread
// (DispatchLocal) adds its wall time and one call to the op's row; nothing is recorded otherwise
// (the disabled cost is one thread-local load per dispatch). Constructed with a device synchronization
// (e.g. cudaDeviceSynchronize), it runs it before and after each kernel, so an asynchronous device op's
// row holds its device time, not its launch's (the profile perturbs the step it measures). With
// record_events it also keeps every call as an Event (start on the steady clock, duration), the timeline a
// Chrome trace is drawn from (tessel.profiler's export_chrome_trace).
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
#include <vector>

namespace tessel {

class OpProfiler {
 public:
  OpProfiler();
  // by_shape: one row per op and input shapes ("matmul [8192, 768] bfloat16, ...") instead of per op.
  explicit OpProfiler(std::function<void()> device_sync, bool by_shape = false, bool record_events = false);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  struct Row {
    int64_t calls = 0;
    double seconds = 0;
  };
  const std::map<std::string, Row>& rows() const { return rows_; }
  std::string Table() const;
  // One kernel call: its row's key, start (nanoseconds of std::chrono::steady_clock, CLOCK_MONOTONIC on Linux,
  // the clock of Python's time.perf_counter_ns) and duration. Empty unless constructed with record_events.
  struct Event {
    std::string op;
    int64_t start_ns = 0;
    int64_t duration_ns = 0;
  };
  const std::vector<Event>& events() const { return events_; }

  // Called by the dispatcher: a kernel call of `op` that started at `start_ns` and took `seconds`.
  static OpProfiler* Current();
  void Add(const std::string& op, int64_t start_ns, double seconds);
  // Waits for the device's queued work when constructed with a device synchronization, else nothing.
  void SyncDevice() const {
    if (device_sync_) device_sync_();
  }
  bool by_shape() const { return by_shape_; }

 private:
  std::map<std::string, Row> rows_;
  std::vector<Event> events_;
  std::function<void()> device_sync_;
  bool by_shape_ = false;
  bool record_events_ = false;
  OpProfiler* previous_;
};

}  // namespace tessel
