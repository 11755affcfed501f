// comm/tracer.h — CommTracer: counts the collectives issued by the calling thread (one rank).
//
// Invariant: while a CommTracer is alive on a thread, every collective that thread issues on any
// ProcessGroup is appended to it (kind, group name, dtype, bytes) at issue time, in issue order.
// Tracers nest: all active tracers on the thread record. Other threads (other ranks) are unaffected.
// This is the tool behind tests that assert "this redistribute costs exactly one all_gather" (the role
// of PyTorch's CommDebugMode).
//
// Example:
//   comm::CommTracer tracer;
//   Tensor full = dt.FullTensor();
//   EXPECT_EQ(tracer.Count(comm::CollectiveKind::kAllGather), 1);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/tensor/dtype.h"

namespace tessel::comm {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSend, kRecv, kBarrier };
std::string_view CollectiveKindName(CollectiveKind kind);  // "all_reduce", "all_gather", ...

struct CollectiveRecord {
  CollectiveKind kind;
  std::string group;  // ProcessGroup::name(), e.g. the mesh axis "tp"
  DType dtype;
  int64_t bytes;      // bytes this rank contributes (input size)
  std::optional<ReduceOp> op = std::nullopt;  // all_reduce and reduce_scatter
};

class CommTracer {
 public:
  CommTracer();
  ~CommTracer();
  CommTracer(const CommTracer&) = delete;
  CommTracer& operator=(const CommTracer&) = delete;

  const std::vector<CollectiveRecord>& records() const { return records_; }
  int Count(CollectiveKind kind) const;
  int Count(CollectiveKind kind, const std::string& group) const;
  int Count(CollectiveKind kind, ReduceOp op) const;  // reductions of `kind` that used `op`
  int Total() const { return static_cast<int>(records_.size()); }
  int64_t Bytes(CollectiveKind kind) const;
  // Bytes each rank sends under the ring algorithms, from the recorded input sizes (groups of
  // `group_size` ranks): all_reduce 2 (W-1)/W n, all_gather (W-1) n_local, reduce_scatter (W-1)/W n,
  // all_to_all (W-1)/W n, broadcast n; so an all_reduce costs exactly an all_gather + reduce_scatter pair.
  double RingBytes(int64_t group_size) const;
  // The same over the collectives of one group (by name, e.g. the mesh axis "dp_shard") only.
  double RingBytes(int64_t group_size, const std::string& group) const;
  // "all_gather(tp) x2, reduce_scatter(dp) x1"
  std::string Summary() const;
  void Clear() { records_.clear(); }

  // Called by ProcessGroup implementations when a collective is issued on this thread.
  static void Record(const CollectiveRecord& record);

 private:
  double RingBytesOf(int64_t group_size, const std::string* group) const;  // group null: every record

  std::vector<CollectiveRecord> records_;
  CommTracer* previous_;
};

// While alive, collectives this thread issues are not recorded by any tracer: the backends' own
// bookkeeping (new_group's agreement exchange) is not a collective of the user's program.
class CommTracerPause {
 public:
  CommTracerPause();
  ~CommTracerPause();
  CommTracerPause(const CommTracerPause&) = delete;
  CommTracerPause& operator=(const CommTracerPause&) = delete;

 private:
  CommTracer* saved_;
};

}  // namespace tessel::comm
