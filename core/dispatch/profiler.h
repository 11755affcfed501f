// core/dispatch/profiler.h — OpProfiler: per-op wall time and call counts for the calling thread.
//
// Invariant: while an OpProfiler is alive on a thread, every local kernel dispatched on that thread
// (DispatchLocal) adds its wall time and one call to the op's row; nothing is recorded otherwise
// (the disabled cost is one thread-local load per dispatch).
//
// Example:
//   OpProfiler prof;
//   RunOneTrainingStep();
//   std::cout << prof.Table();    // op, calls, total ms, share — slowest first
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tessel {

class OpProfiler {
 public:
  OpProfiler();
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

 private:
  std::map<std::string, Row> rows_;
  OpProfiler* previous_;
};

}  // namespace tessel
