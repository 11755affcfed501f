// core/dispatch/profiler.cc — per-thread op timing.
#include "core/dispatch/profiler.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace tessel {
namespace {
thread_local OpProfiler* current = nullptr;
}  // namespace

OpProfiler::OpProfiler() : previous_(current) { current = this; }
OpProfiler::OpProfiler(std::function<void()> device_sync, bool by_shape, bool record_events) : OpProfiler() {
  device_sync_ = std::move(device_sync);
  by_shape_ = by_shape;
  record_events_ = record_events;
}
OpProfiler::~OpProfiler() { current = previous_; }
OpProfiler* OpProfiler::Current() { return current; }

void OpProfiler::Add(const std::string& op, int64_t start_ns, double seconds) {
  Row& r = rows_[op];
  ++r.calls;
  r.seconds += seconds;
  if (record_events_) events_.push_back({op, start_ns, static_cast<int64_t>(seconds * 1e9)});
}

std::string OpProfiler::Table() const {
  std::vector<std::pair<std::string, Row>> v(rows_.begin(), rows_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [k, r] : v) total += r.seconds;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-40s %8s %12s %7s\n", "op", "calls", "total ms", "share");
  out += line;
  for (const auto& [k, r] : v) {
    std::snprintf(line, sizeof(line), "%-40s %8lld %12.3f %6.1f%%\n", k.c_str(), static_cast<long long>(r.calls),
                  r.seconds * 1e3, total > 0 ? 100.0 * r.seconds / total : 0.0);
    out += line;
  }
  return out;
}

}  // namespace tessel
