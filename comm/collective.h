// comm/collective.h — what every backend shares about one collective call: its descriptor (kind,
// sequence number, dtype, bytes, root, op, splits), argument validation, and the mismatch verdict.
//
// Invariant: FindMismatch is a pure function of the descriptors of all members, so every rank that
// evaluates it on the same descriptors raises the same message ("rank 1 called all_gather #12 (4096 B)
// while rank 0 called reduce_scatter #12 (8192 B)"). Validation runs on the caller's thread at issue
// time and throws kInvalidArgument naming the op, shapes and dtypes.
//
// Example:
//   CollectiveDesc d = DescribeAllGather(output, input, pg.size(), pg.rank(), DeviceType::kCpu);   // validates, fills bytes
//   d.seq = next_seq++;
//   if (auto msg = FindMismatch(all_descs, "group 'world'")) TESSEL_FAIL(ErrorCode::kAborted, *msg);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/tracer.h"
#include "core/tensor/tensor.h"

namespace tessel::comm {

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kBarrier;
  int64_t seq = 0;
  DType dtype = DType::kFloat32;
  int64_t bytes = 0;  // bytes this rank contributes (its input)
  int root = -1;      // broadcast only
  std::optional<ReduceOp> op;
  // all_to_all only: rows per peer and bytes per row (every other field then compares as usual,
  // except `bytes`, which may differ between ranks).
  std::vector<int64_t> input_splits;
  std::vector<int64_t> output_splits;
  int64_t row_bytes = 0;
  // The input's shape (at most kMaxDescDims dims: further ones fold into the last), compared across ranks
  // except for all_to_all: equal byte counts of different shapes ([2, 3] against [3, 2]) are a mismatch too.
  std::vector<int64_t> shape;
  // What the call is for, from the issuing thread's CollectiveLabel ("fully_shard 'layers.2'"; empty when no layer
  // said), and its XXH3-64 hash (0 for none). The hash is compared across ranks like the rest: two ranks
  // all-gathering the parameters of two equally sized fully_shard groups would otherwise swap them silently (ranks
  // whose forwards took different paths). The text is shown in every message that names the call; a peer's
  // arrives over gloo cut to its last kMaxLabelWireBytes (whole UTF-8 characters).
  std::string label;
  uint64_t label_hash = 0;
};

inline constexpr int kMaxDescDims = 8;
inline constexpr size_t kMaxLabelWireBytes = 56;

// Names what the collectives this thread issues while it lives are for (the layers above comm: fully_shard names
// its group, tensor parallelism its module), restoring the previous label when it ends; nests. Control characters
// become spaces (messages and the gloo wait monitor's snapshots are line- and tab-separated). Cheap: a
// thread-local string and its hash, made once per scope.
//
// Example:
//   CollectiveLabel label(Str("fully_shard '", fqn, "'"));
//   group->AllGather(out, in);   // a mismatch names it "all_gather #5 (64 B, float32) for fully_shard 'layers.2'"
class CollectiveLabel {
 public:
  explicit CollectiveLabel(std::string label);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;
  static const std::string& Current();  // this thread's, "" outside any
  static uint64_t CurrentHash();        // its hash, 0 outside any

 private:
  std::string previous_;
  uint64_t previous_hash_;
};

// The last `max_bytes` of `label`, starting on a whole UTF-8 character, "..." in front when cut.
std::string LabelTail(const std::string& label, size_t max_bytes);

// "all_gather #12 (4096 B)"; with_details adds dtype, op and root ("all_reduce #3 (16 B, float32, sum)"); a labelled
// call ends " for <label>".
std::string DescribeCall(const CollectiveDesc& d, bool with_details, bool with_shape = false);

// nullopt when all members agree; else the message every rank raises (code kAborted). `descs` holds
// one descriptor per group rank; `group_label` names the group ("group 'tp' (global ranks [0, 2])").
std::optional<std::string> FindMismatch(std::span<const CollectiveDesc* const> descs, const std::string& group_label);

// "group 'tp' (global ranks [0, 2])"
std::string GroupLabel(const std::string& name, std::span<const int> global_ranks);

// ---- validation (caller's thread; throws kInvalidArgument) ------------------------------------------
// Every tensor must be a defined, dense, contiguous tensor on a device of `device_type`.
void CheckCommTensor(const char* op, const Tensor& t, DeviceType device_type);

CollectiveDesc DescribeAllReduce(const Tensor& t, ReduceOp op, DeviceType device_type);
// output: dim 0 = world * input dim 0 (a 0-d input gathers into a 1-d output of size world). An input
// whose bytes overlap the output must be exactly this `rank`'s block of it (in-place all_gather).
CollectiveDesc DescribeAllGather(const Tensor& output, const Tensor& input, int world, int rank,
                                 DeviceType device_type);
// Likewise an output whose bytes overlap the input must be exactly `rank`'s block of it.
CollectiveDesc DescribeReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op, int world, int rank,
                                     DeviceType device_type);
// Resolves empty split lists to equal splits (dim 0 must then divide by world).
CollectiveDesc DescribeAllToAll(const Tensor& output, const Tensor& input, std::vector<int64_t> output_splits,
                                std::vector<int64_t> input_splits, int world, DeviceType device_type);
CollectiveDesc DescribeBroadcast(const Tensor& t, int root, int world, DeviceType device_type);
void CheckP2POps(const std::vector<P2POp>& ops, int rank, int world, DeviceType device_type);

// Records `d` in the calling thread's tracers (CommTracer) under `group`.
void TraceCall(const CollectiveDesc& d, const std::string& group);
// Records each send and receive of a batch in the calling thread's tracers under `group`, and marks each
// receive's tensor written (MarkWritten): what every backend's BatchP2P does once CheckP2POps passed.
void TraceP2POps(const std::vector<P2POp>& ops, const std::string& group);
// Marks `t` as written in place (bumps its storage's version counter for autograd).
void MarkWritten(const Tensor& t);

// A CPU backend's ProcessGroup::RecvAnySource: checks the tensor (kInvalidArgument also for a group with no
// other rank), traces the receive and marks the tensor written, then `issue(source)` queues it, setting
// *source to the sender before its work completes. Returns that work with SourceRank() reading *source.
WorkPtr IssueRecvAnySource(const ProcessGroup& group, const Tensor& tensor,
                           const std::function<WorkPtr(std::shared_ptr<int> source)>& issue);

// Byte offsets of each peer's block given split rows: offsets[j] = row_bytes * sum(splits[0..j)).
std::vector<int64_t> SplitOffsets(std::span<const int64_t> splits, int64_t row_bytes);

}  // namespace tessel::comm
