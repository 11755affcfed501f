// comm/process_group.h — ProcessGroup: the collective interface every distributed layer talks through.
//
// Invariant: every call returns a Work immediately (the collective may still be running); calls on one
// group complete in issue order (FIFO per group). All members of a group must issue the same sequence
// of collectives; a mismatch (different kind, dtype or byte count at the same sequence number) raises
// kAborted on every rank naming both calls, and a peer that never arrives raises kDeadlineExceeded
// after the group's timeout naming the missing ranks. Nothing waits forever.
// Tensors are local dense tensors (handles: the op writes into their storage); semantics follow
// torch.distributed's *_into_tensor forms: AllGather/ReduceScatter concatenate/split along dim 0.
//
// Example:
//   comm::WorkPtr w = pg->AllReduce(grad, comm::ReduceOp::kAvg);
//   ... overlap compute ...
//   w->Wait();                      // rethrows a comm-thread error on this thread
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/work.h"
#include "core/tensor/tensor.h"

namespace tessel::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin, kProduct };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", ...

// One point-to-point operation of a batch (see ProcessGroup::BatchP2P); `peer` is a group rank.
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  Tensor tensor;
  int peer;
  int tag = 0;
};

// The peer of a receive that takes the first matching send from any other rank (ProcessGroup::RecvAnySource).
inline constexpr int kAnySource = -1;

inline constexpr std::chrono::milliseconds kDefaultTimeout{300'000};

// A NewGroup's members: their global ranks, the list as "0,2,3" and this rank's index in it (-1 when it is
// not a member). CheckNewGroupRanks makes one.
struct NewGroupMembers {
  std::vector<int> globals;
  std::string rank_list;
  int my_index = -1;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;  // rank within this group
  virtual int size() const = 0;
  // Global (world) rank of each member, in group-rank order.
  virtual const std::vector<int>& global_ranks() const = 0;
  virtual std::string backend_name() const = 0;  // "threads", "gloo", "nccl"
  // A label used by errors and the tracer (DeviceMesh sets the axis name, e.g. "tp").
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // In place on `tensor`. bf16/fp16 reduce in fp32 and round once.
  virtual WorkPtr AllReduce(const Tensor& tensor, ReduceOp op) = 0;
  // output has dim 0 = size() * input dim 0 (other dims equal); rank r's input lands in slice r.
  virtual WorkPtr AllGather(const Tensor& output, const Tensor& input) = 0;
  // input has dim 0 = size() * output dim 0; rank r receives the reduction of slice r.
  virtual WorkPtr ReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  // Splits along dim 0: input_split_sizes[j] rows go to rank j; output_split_sizes[j] rows come from j.
  // Empty split lists mean equal splits.
  virtual WorkPtr AllToAll(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_split_sizes,
                           const std::vector<int64_t>& input_split_sizes) = 0;
  virtual WorkPtr Broadcast(const Tensor& tensor, int root) = 0;
  // One-op batches of BatchP2P (every backend matches sends and receives there).
  WorkPtr Send(const Tensor& tensor, int dst, int tag = 0) { return BatchP2P({P2POp{P2POp::Kind::kSend, tensor, dst, tag}}); }
  WorkPtr Recv(const Tensor& tensor, int src, int tag = 0) { return BatchP2P({P2POp{P2POp::Kind::kRecv, tensor, src, tag}}); }
  virtual WorkPtr Barrier() = 0;
  // Posts every op of `ops` at once and completes when all are done (torch's batch_isend_irecv), so
  // exchanges in both directions between two ranks cannot deadlock. Send/Recv are one-op batches and,
  // like every call on a group, complete in issue order; a send and a recv match by (peer, tag) in
  // posting order. The default implementation throws kUnimplemented.
  virtual WorkPtr BatchP2P(const std::vector<P2POp>& ops);
  // Receives the first send with `tag` to this rank from any other rank of the group (torch's recv(src=None),
  // ProcessGroup::recvAnysource). Sends match it in posting order, as they match Recv from their rank; the
  // size and dtype must agree as for Recv. The returned work's SourceRank() is the sender's group rank once
  // Wait() returned. Fails like Recv (kDeadlineExceeded; kAborted when every other rank is gone). The
  // default implementation (NCCL's, as in torch: ncclRecv needs a peer) throws kUnimplemented.
  virtual WorkPtr RecvAnySource(const Tensor& tensor, int tag = 0);

  // Collective over this group: every member calls with the same `ranks` (group ranks of this group),
  // in the same order as its other NewGroup calls. Group rank i of the new group is ranks[i].
  // Members get the new group (same timeout; name "<name>.<n>" until set_name); non-members get nullptr.
  virtual std::shared_ptr<ProcessGroup> NewGroup(const std::vector<int>& ranks) = 0;
  // torch's new_group(use_local_synchronization=True): only the members of `ranks` call it (a non-member is
  // kInvalidArgument), so the group's other ranks need not take part. A member's k-th such call with a rank
  // list pairs with the other members' k-th with the same list; the members check it with each other (an
  // untraced all_gather over the new group, AgreeOnNewGroup) and a member that never comes is an error after
  // the timeout. Name "<name>.local[<ranks>]#<k>". Backends without MakeMemberGroup (NCCL's) throw
  // kUnimplemented.
  std::shared_ptr<ProcessGroup> NewGroupAmongMembers(const std::vector<int>& ranks);

  // A group derived from this one, created by `make` (which may call NewGroup: every member must then
  // ask for `key` at the same point) the first time `key` is asked for, and kept until this group is
  // destroyed. So a layer that needs derived groups (fully_shard's post-forward subgroups) creates them
  // once per group, the same way on every rank: a cache of weak references would instead depend on when
  // each rank's garbage collector dropped the previous user, and ranks would disagree on whether to
  // call NewGroup.
  std::shared_ptr<ProcessGroup> CachedSubgroup(const std::string& key,
                                               const std::function<std::shared_ptr<ProcessGroup>()>& make);

 protected:
  // For the CPU backends' NewGroup: checks `ranks`, agrees with every rank of this group on the call
  // (AgreeOnNewGroup) and returns MakeMemberGroup(members, "<key_prefix><n>[<ranks>]", "<n>") on members,
  // nullptr elsewhere (n: this group's NewGroup count).
  std::shared_ptr<ProcessGroup> NewGroupAgreed(const std::vector<int>& ranks, const std::string& key_prefix);
  // The backend's group object over `members` (a rendezvous under `key_suffix`, named "<name>.<name_suffix>");
  // the default throws kUnimplemented.
  virtual std::shared_ptr<ProcessGroup> MakeMemberGroup(const NewGroupMembers& members,
                                                        const std::string& key_suffix,
                                                        const std::string& name_suffix);

 private:
  std::string name_ = "world";
  int64_t next_group_id_ = 0;                          // NewGroupAgreed calls
  std::map<std::string, int64_t> local_group_counts_;  // NewGroupAmongMembers calls per rank list
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
  std::mutex subgroups_mu_;  // held while `make` runs: one creation per key
  std::map<std::string, std::shared_ptr<ProcessGroup>> subgroups_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// For NewGroup implementations (CPU backends): one untraced all_gather on `parent` of each rank's
// (id, size, hash, first, last) of the rank list it passed to its id-th NewGroup. Every parent rank calls
// NewGroup, so this completes or fails at once: a dead peer is reported by the all_gather (naming it)
// instead of the new group's rendezvous waiting out the timeout, and ranks that create groups in another
// order or with other lists raise kInvalidArgument naming both calls, instead of each timing out in a
// collective on a group the other never joined.
void AgreeOnNewGroup(ProcessGroup& parent, int64_t id, const std::vector<int>& ranks);

// For NewGroup implementations: `ranks` checked against `parent` (kInvalidArgument when empty, out of range
// or listed twice), as NewGroupMembers.
NewGroupMembers CheckNewGroupRanks(const ProcessGroup& parent, const std::vector<int>& ranks);

}  // namespace tessel::comm
