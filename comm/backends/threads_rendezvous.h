// comm/backends/threads_rendezvous.h — the shared state behind the threads backend: one
// ThreadsWorld per RunRanks (abort flag + group registry) and one GroupRendezvous per group, where
// each member posts its call and the collective runs once all members posted.
//
// Invariant: for sequence number s of a group, RunCollective returns on a member only after (a) all
// members posted call s and agreed on it, every member executed all phases and passed the completion
// barrier (so no peer still reads this member's buffers) — in staged mode it executed its one phase
// on the slot's copies of the inputs and leaves without a barrier — or (b) it throws — kAborted
// (descriptors disagree, the world aborted, the group broke earlier) or kDeadlineExceeded (a member
// did not post within the timeout; the group is then unusable). Executors only read peers' buffers
// (or the slot's copies) and write their own, and every direct phase ends with a barrier, so there
// is no data race.
//
// Deadlock detection (collectives issued on different groups in different orders): ThreadsWorld knows,
// per rank thread, the collective its caller is blocked on in Work::Wait (BeginBlockedWait) and, per
// (rank, group), how many calls were issued and by which thread: the wait-for graph of comm/wait_graph.h.
// A cycle can only close when a thread blocks, so BeginBlockedWait looks for one then; it records the
// verdict for every call of the cycle, and every member waiting in those calls raises it (kAborted) at
// once instead of waiting out the timeout. Sends and receives take part the same way: a member's p2p
// thread counts each op on its channel before posting it and, when it must wait, registers one blocked
// call per unmatched op (a rank that left a pipeline step midway while its peer waits in it). Ops are
// registered and, once matched, unregistered under the group's lock, so the registered ops are exactly the
// unmatched ones a blocked thread waits on (a receive from any member may take a send its channel count
// never sees).
//
// Example (backend side):
//   RankCall call{desc, in_ptr, out_ptr};
//   rendezvous->RunCollective(rank, call, /*num_phases=*/1, &ExecAllGather, timeout, label);
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "comm/collective.h"
#include "comm/process_group.h"
#include "comm/wait_graph.h"

namespace tessel::comm::threads_internal {

// One member's side of a collective: its descriptor and raw buffers (peers read `input` directly).
struct RankCall {
  CollectiveDesc desc;
  const void* input = nullptr;
  void* output = nullptr;
};

// Runs phase `phase` of a collective on member `rank`'s comm thread, given every member's call.
using Executor = void (*)(int rank, std::span<const RankCall* const> calls, int phase);

class ThreadsWorld;

class GroupRendezvous {
 public:
  GroupRendezvous(std::shared_ptr<ThreadsWorld> world, std::string key, std::vector<int> global_ranks);

  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::string& key() const { return key_; }
  const std::shared_ptr<ThreadsWorld>& world() const { return world_; }

  // See the file comment. `label` names the group in errors. `staged_bytes` >= 0: staged mode (small
  // messages): this member first copies `staged_bytes` of its input into the slot, and every member's
  // executor reads only those copies (calls[j]->input), so after the one phase it leaves at once — no
  // phase barrier, one synchronization per collective instead of two or three. REQUIRES then
  // num_phases == 1 and an executor that reads no peer's `output`.
  void RunCollective(int rank, const RankCall& call, int num_phases, Executor execute,
                     std::chrono::milliseconds timeout, const std::string& label, int64_t staged_bytes = -1);
  // Posts every op, copies the pairs it completes, and waits until all its ops are done. Throws
  // kDeadlineExceeded (an op found no partner in time) or kAborted (size/dtype mismatch, world aborted).
  // A receive whose peer is kAnySource takes the earliest posted matching send from any member; its
  // sender is stored in *any_source (REQUIRES: at most one such op, and any_source non-null with one).
  void RunP2P(int rank, const std::vector<P2POp>& ops, std::chrono::milliseconds timeout, const std::string& label,
              int* any_source = nullptr);

  // Wakes every waiter (the world aborted).
  void WakeAll();

 private:
  // A member's call in staged mode, owned by the slot: peers may read it after the member left.
  struct StagedCall {
    RankCall call;
    std::unique_ptr<char[]> data;
  };
  struct Slot {
    std::vector<const RankCall*> calls;
    std::vector<std::unique_ptr<StagedCall>> staged;  // staged mode only
    int arrived = 0;
    std::optional<std::string> mismatch;
    std::optional<std::string> timeout_message;
    int phase_done[2] = {0, 0};
    int departed = 0;
  };
  struct P2PEntry {
    bool is_send = false;
    int src, dst, tag;  // a receive from any member: src kAnySource until matched, then the sender
    uint64_t seq = 0;   // posting order (which of several matching entries is taken)
    const void* send_data = nullptr;
    void* recv_data = nullptr;
    int64_t bytes = 0;
    DType dtype = DType::kFloat32;
    bool matched = false;
    bool done = false;
    std::string error;
    std::string channel;       // P2PChannelKey (wait_graph.h); "" for a receive from any member
    int64_t channel_seq = -1;  // this member's index of the op among its posts on `channel`
    int64_t blocked = -1;      // ThreadsWorld::BeginBlockedWait handle while its thread waits on it unmatched
  };
  using P2PKey = std::tuple<int, int, int>;  // (src, dst, tag)
  using P2PQueue = std::map<P2PKey, std::deque<std::shared_ptr<P2PEntry>>>;

  void ThrowIfUnusable(const CollectiveDesc& desc, const std::string& label);
  void WaitForArrival(std::unique_lock<std::mutex>& lock, Slot& slot, int rank, const RankCall& call,
                      std::chrono::milliseconds timeout, const std::string& label);
  void Leave(Slot& slot, int64_t seq);
  // The members (group ranks, with their global ranks) that have not posted to `slot` and never will (their
  // rank function returned, or they called destroy_process_group), with why; empty when none.
  std::string GoneMissing(const Slot& slot) const;
  // " (global g) <why it will not post>" for group rank `rank`, which is gone.
  std::string GoneReason(int rank) const;
  std::shared_ptr<P2PEntry> Post(int rank, const P2POp& op,
                                 std::vector<std::pair<std::shared_ptr<P2PEntry>, std::shared_ptr<P2PEntry>>>& pairs);
  void CancelPending(std::unique_lock<std::mutex>& lock, const std::vector<std::shared_ptr<P2PEntry>>& mine);
  std::string P2PName(const P2PEntry& e) const;
  // The earliest posted entry of `queue` that matches (src, dst, tag), src kAnySource matching every
  // source; removed from the queue. Null when none.
  std::shared_ptr<P2PEntry> TakeMatch(P2PQueue& queue, int src, int dst, int tag);

  std::shared_ptr<ThreadsWorld> world_;
  const std::string key_;
  const std::vector<int> global_ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Bumped (under mu_) with every notify of cv_: spinning waiters poll it without the lock (spin.h).
  std::atomic<uint64_t> changes_{0};
  // REQUIRES: mu_ held. Wakes every waiter, spinning or blocked.
  void NotifyLocked() {
    changes_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
  }
  std::map<int64_t, Slot> slots_;
  std::optional<std::string> broken_;  // set by a collective timeout: later collectives fail at once
  P2PQueue pending_sends_;
  P2PQueue pending_recvs_;
  uint64_t p2p_seq_ = 0;  // P2PEntry::seq of the next posted entry
};

class ThreadsWorld {
 public:
  // `threads_per_rank`: each rank thread's intra-op budget (waiters spin only if every thread has a core).
  ThreadsWorld(int world_size, int threads_per_rank);
  int world_size() const { return world_size_; }
  // Rendezvous waits poll briefly before blocking (core/base/spin.h) only when every rank thread has a
  // core: with more ranks than cores a spinning waiter would take the core its peer needs to arrive.
  std::chrono::microseconds spin() const { return spin_; }

  // Records the first failure ("rank 2 failed: <message>") and wakes every group's waiters.
  void Abort(int global_rank, const std::string& message);
  // Records that a rank's function returned (its queued collectives drained) and wakes every group's
  // waiters: a collective or p2p op still waiting for that rank fails at once naming it, instead of
  // waiting out the timeout.
  void MarkExited(int global_rank);
  // Records that a rank left its groups (destroy_process_group) and wakes every group's waiters, as MarkExited
  // does; Rejoin brings it back.
  void MarkDeparted(int global_rank);
  // init_process_group after destroy_process_group: the rank joins the next generation of its world and waits
  // until every other rank has joined it too, as torch's init is a rendezvous (a fast rank's next collective
  // would otherwise find a slow peer still departed and fail). Throws kAborted when a rank that has not joined
  // returns from RunRanks (or the world aborts), kDeadlineExceeded after `timeout`.
  void Rejoin(int global_rank, std::chrono::milliseconds timeout);
  // Why a rank will not post again: its function returned (kReturned), it called destroy_process_group
  // (kDeparted), or neither (kPresent).
  enum class Presence { kPresent, kReturned, kDeparted };
  Presence presence(int global_rank) const;
  bool gone(int global_rank) const { return presence(global_rank) != Presence::kPresent; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string abort_message() const;
  int first_failed_rank() const;

  // Deadlock detection (file comment). NoteIssued: the calling thread of `global_rank` issued call
  // `seq` of group `key` (or created its handle of the group: seq -1).
  void NoteIssued(int global_rank, const std::string& key, int64_t seq);
  // `global_rank`'s p2p queue (P2PPosterId(issuer_key)) is about to post a send or receive on the p2p
  // channel `channel` of the group whose P2PIssuerKey is `issuer_key`: counts it, returns its index there.
  int64_t NotePosted(int global_rank, const std::string& channel, const std::string& issuer_key);
  // A batch of sends and receives of `global_rank`'s p2p queue submitted, started or finished: wait_graph.h's
  // NoteBatch (the ticket of a submitted one).
  int64_t NoteBatch(int global_rank, const std::string& issuer_key, BatchEvent event);
  // The calling thread is about to block on `wait` (its thread filled in here, except for p2p, whose
  // blocked call names its queue); returns a handle
  // for EndBlockedWait. Finds a cycle it closes, records its verdict and wakes every group — or, with
  // `found` given (a caller holding a group's lock), sets *found and leaves the waking to the caller.
  int64_t BeginBlockedWait(BlockedCall wait, bool* found = nullptr);
  // Wakes every group's waiters (after BeginBlockedWait found a deadlock; no group lock held).
  void WakeAllGroups();
  void EndBlockedWait(int64_t handle);
  // The verdict for call `seq` of group `key` when it is part of a detected deadlock.
  std::optional<std::string> deadlock(const std::string& key, int64_t seq) const;

  // The rendezvous of the group `key`, created by its first member to ask.
  std::shared_ptr<GroupRendezvous> GetOrCreateGroup(const std::shared_ptr<ThreadsWorld>& self, const std::string& key,
                                                    const std::vector<int>& global_ranks);

 private:
  const int world_size_;
  const std::chrono::microseconds spin_;
  mutable std::mutex mu_;
  std::atomic<bool> aborted_{false};
  std::vector<bool> exited_ = std::vector<bool>(static_cast<size_t>(world_size_), false);
  std::vector<bool> departed_ = std::vector<bool>(static_cast<size_t>(world_size_), false);
  std::vector<int> generation_ = std::vector<int>(static_cast<size_t>(world_size_), 0);  // Rejoin calls per rank
  std::condition_variable rejoin_cv_;  // generation_, exited_, aborted_ changes (under mu_)
  std::string abort_message_;
  int first_failed_rank_ = -1;
  std::map<std::string, std::weak_ptr<GroupRendezvous>> groups_;
  IssueMap issued_;
  std::map<int64_t, BlockedCall> blocked_;  // by handle
  int64_t next_handle_ = 0;
  std::map<std::pair<std::string, int64_t>, std::string> deadlocks_;  // (group key, seq) -> verdict
};

}  // namespace tessel::comm::threads_internal
