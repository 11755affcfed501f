// comm/tracer.cc — CommTracer: a thread-local stack of active tracers; Record() appends to all of them.
#include "comm/tracer.h"

#include <map>
#include <utility>

#include "core/base/error.h"

namespace tessel::comm {
namespace {
// Innermost active tracer of this thread; each tracer links to the one it shadows.
thread_local CommTracer* top_tracer = nullptr;
}  // namespace

std::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kSend: return "send";
    case CollectiveKind::kRecv: return "recv";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown";
}

CommTracer::CommTracer() : previous_(top_tracer) { top_tracer = this; }

CommTracer::~CommTracer() {
  // Tracers are scoped objects, so they die in reverse order of construction on their thread.
  top_tracer = previous_;
}

CommTracerPause::CommTracerPause() : saved_(top_tracer) { top_tracer = nullptr; }
CommTracerPause::~CommTracerPause() { top_tracer = saved_; }

int CommTracer::Count(CollectiveKind kind) const {
  int n = 0;
  for (const CollectiveRecord& r : records_) n += r.kind == kind;
  return n;
}

int CommTracer::Count(CollectiveKind kind, const std::string& group) const {
  int n = 0;
  for (const CollectiveRecord& r : records_) n += r.kind == kind && r.group == group;
  return n;
}

int CommTracer::Count(CollectiveKind kind, ReduceOp op) const {
  int n = 0;
  for (const CollectiveRecord& r : records_) n += r.kind == kind && r.op == op;
  return n;
}

int64_t CommTracer::Bytes(CollectiveKind kind) const {
  int64_t n = 0;
  for (const CollectiveRecord& r : records_) {
    if (r.kind == kind) n += r.bytes;
  }
  return n;
}

double CommTracer::RingBytes(int64_t group_size) const { return RingBytesOf(group_size, nullptr); }

double CommTracer::RingBytes(int64_t group_size, const std::string& group) const {
  return RingBytesOf(group_size, &group);
}

double CommTracer::RingBytesOf(int64_t group_size, const std::string* group) const {
  const double w = static_cast<double>(group_size);
  double total = 0;
  for (const CollectiveRecord& r : records_) {
    if (group != nullptr && r.group != *group) continue;
    const double n = static_cast<double>(r.bytes);
    switch (r.kind) {
      case CollectiveKind::kAllReduce: total += 2 * (w - 1) / w * n; break;
      case CollectiveKind::kAllGather: total += (w - 1) * n; break;
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kAllToAll: total += (w - 1) / w * n; break;
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kSend: total += n; break;
      case CollectiveKind::kRecv:
      case CollectiveKind::kBarrier: break;
    }
  }
  return total;
}

std::string CommTracer::Summary() const {
  // Groups by (kind, group) in order of first appearance.
  std::vector<std::pair<std::string, int>> rows;
  std::map<std::string, size_t> index;
  for (const CollectiveRecord& r : records_) {
    std::string key = Str(CollectiveKindName(r.kind), "(", r.group, ")");
    auto [it, inserted] = index.emplace(key, rows.size());
    if (inserted) rows.emplace_back(key, 0);
    ++rows[it->second].second;
  }
  std::string out;
  for (const auto& [key, count] : rows) {
    if (!out.empty()) out += ", ";
    out += Str(key, " x", count);
  }
  return out;
}

void CommTracer::Record(const CollectiveRecord& record) {
  for (CommTracer* t = top_tracer; t != nullptr; t = t->previous_) t->records_.push_back(record);
}

}  // namespace tessel::comm
