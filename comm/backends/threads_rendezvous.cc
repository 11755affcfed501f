// comm/backends/threads_rendezvous.cc — GroupRendezvous (collective slots, p2p mailbox) and ThreadsWorld.
#include "comm/backends/threads_rendezvous.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "comm/reduce.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/base/spin.h"

namespace tessel::comm::threads_internal {

using Clock = std::chrono::steady_clock;

ThreadsWorld::ThreadsWorld(int world_size, int threads_per_rank)
    : world_size_(world_size),
      spin_(world_size * std::max(threads_per_rank, 1) <= HardwareConcurrency() ? kHandOffSpin
                                                                               : std::chrono::microseconds(0)) {}

GroupRendezvous::GroupRendezvous(std::shared_ptr<ThreadsWorld> world, std::string key, std::vector<int> global_ranks)
    : world_(std::move(world)), key_(std::move(key)), global_ranks_(std::move(global_ranks)) {}

void GroupRendezvous::WakeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  NotifyLocked();
}

void GroupRendezvous::ThrowIfUnusable(const CollectiveDesc& desc, const std::string& label) {
  if (world_->aborted()) {
    TESSEL_FAIL(ErrorCode::kAborted, world_->abort_message(), " (", DescribeCall(desc, false), " on ", label,
                " was cancelled)");
  }
  if (broken_) {
    TESSEL_FAIL(ErrorCode::kAborted, DescribeCall(desc, false), " on ", label,
                " cannot run: the group is unusable after an earlier error: ", *broken_);
  }
}

std::string GroupRendezvous::GoneMissing(const Slot& slot) const {
  std::string returned, departed;
  for (int j = 0; j < size(); ++j) {
    if (slot.calls[j] != nullptr) continue;
    const ThreadsWorld::Presence p = world_->presence(global_ranks_[j]);
    if (p == ThreadsWorld::Presence::kPresent) continue;
    std::string& list = p == ThreadsWorld::Presence::kReturned ? returned : departed;
    list += Str(list.empty() ? "" : ", ", j, " (global ", global_ranks_[j], ")");
  }
  std::string out;
  if (!returned.empty()) out = Str("rank(s) ", returned, " already returned from RunRanks (or stopped)");
  if (!departed.empty()) {
    out += Str(out.empty() ? "" : " and ", "rank(s) ", departed, " called destroy_process_group()");
  }
  return out;
}

std::string GroupRendezvous::GoneReason(int rank) const {
  const int global = global_ranks_[static_cast<size_t>(rank)];
  const bool departed = world_->presence(global) == ThreadsWorld::Presence::kDeparted;
  return Str(" (global ", global, ") ",
             departed ? "called destroy_process_group()" : "already returned from RunRanks (or stopped)");
}

void GroupRendezvous::Leave(Slot& slot, int64_t seq) {
  if (++slot.departed == size()) slots_.erase(seq);
}

void GroupRendezvous::WaitForArrival(std::unique_lock<std::mutex>& lock, Slot& slot, int rank, const RankCall& call,
                                     std::chrono::milliseconds timeout, const std::string& label) {
  const int world = size();
  const auto deadline = Clock::now() + timeout;
  std::string gone;
  std::optional<std::string> deadlock;
  // Peers usually arrive within microseconds (core/base/spin.h): poll before the checked, blocking wait.
  SpinUnderLock(
      lock, [&] { return slot.arrived == world || world_->aborted() || slot.timeout_message.has_value(); }, changes_,
      world_->spin());
  cv_.wait_until(lock, deadline, [&] {
    if (slot.arrived == world || world_->aborted() || slot.timeout_message.has_value()) return true;
    deadlock = world_->deadlock(key_, call.desc.seq);
    if (deadlock) return true;
    gone = GoneMissing(slot);
    return !gone.empty();
  });
  if (slot.arrived == world) return;
  if (deadlock && !world_->aborted() && !slot.timeout_message) {
    slot.calls[rank] = nullptr;
    if (--slot.arrived == 0) slots_.erase(call.desc.seq);
    broken_ = *deadlock;  // the members disagree on what call s is: the group cannot be used again
    TESSEL_FAIL(ErrorCode::kAborted, *deadlock);
  }
  if (!world_->aborted() && !slot.timeout_message && !gone.empty()) {
    slot.calls[rank] = nullptr;
    if (--slot.arrived == 0) slots_.erase(call.desc.seq);
    TESSEL_FAIL(ErrorCode::kAborted, DescribeCall(call.desc, false), " on ", label, " cannot complete: ", gone,
                " and will never call it");
  }
  // Not everyone came: withdraw this member's call (nobody may read it after we leave).
  std::string missing;
  for (int j = 0; j < world; ++j) {
    if (slot.calls[j] == nullptr) missing += Str(missing.empty() ? "" : ", ", j, " (global ", global_ranks_[j], ")");
  }
  slot.calls[rank] = nullptr;
  const int64_t seq = call.desc.seq;
  const bool timed_out_here = !world_->aborted() && !slot.timeout_message;
  if (timed_out_here) {
    slot.timeout_message = Str(DescribeCall(call.desc, false), " on ", label, " timed out after ", timeout.count(),
                               " ms: rank(s) ", missing, " never arrived");
    broken_ = *slot.timeout_message;
    NotifyLocked();
  }
  std::optional<std::string> timeout_message = slot.timeout_message;
  if (--slot.arrived == 0) slots_.erase(seq);
  if (timeout_message) TESSEL_FAIL(ErrorCode::kDeadlineExceeded, *timeout_message);
  TESSEL_FAIL(ErrorCode::kAborted, world_->abort_message(), " (while rank ", rank, " waited in ",
              DescribeCall(call.desc, false), " on ", label, ")");
}

void GroupRendezvous::RunCollective(int rank, const RankCall& call, int num_phases, Executor execute,
                                    std::chrono::milliseconds timeout, const std::string& label, int64_t staged_bytes) {
  TESSEL_INTERNAL_ASSERT(num_phases >= 1 && num_phases <= 2, "num_phases ", num_phases);
  const bool staged = staged_bytes >= 0;
  TESSEL_INTERNAL_ASSERT(!staged || num_phases == 1, "staged collectives run one phase, got ", num_phases);
  std::unique_ptr<StagedCall> own;
  if (staged) {  // copy outside the lock
    own = std::make_unique<StagedCall>(StagedCall{call, std::unique_ptr<char[]>(new char[std::max<int64_t>(staged_bytes, 1)])});
    if (staged_bytes > 0) std::memcpy(own->data.get(), call.input, static_cast<size_t>(staged_bytes));
    own->call.input = own->data.get();
  }
  const int world = size();
  const int64_t seq = call.desc.seq;
  std::unique_lock<std::mutex> lock(mu_);
  ThrowIfUnusable(call.desc, label);
  Slot& slot = slots_[seq];
  if (slot.calls.empty()) slot.calls.assign(world, nullptr);
  TESSEL_INTERNAL_ASSERT(slot.calls[rank] == nullptr, "rank ", rank, " posted ", DescribeCall(call.desc, false),
                         " twice on ", label);
  if (staged) {
    if (slot.staged.empty()) slot.staged.resize(world);
    slot.calls[rank] = &own->call;
    slot.staged[rank] = std::move(own);
  } else {
    slot.calls[rank] = &call;
  }
  if (++slot.arrived == world) {
    // The last to arrive computes the verdict once; every member reads the same one.
    std::vector<const CollectiveDesc*> descs(world);
    for (int j = 0; j < world; ++j) descs[j] = &slot.calls[j]->desc;
    slot.mismatch = FindMismatch(descs, label);
    NotifyLocked();
  }
  WaitForArrival(lock, slot, rank, call, timeout, label);
  if (slot.mismatch) {
    const std::string message = *slot.mismatch;
    Leave(slot, seq);
    TESSEL_FAIL(ErrorCode::kAborted, message);
  }
  const std::span<const RankCall* const> calls(slot.calls.data(), world);
  std::exception_ptr error;
  for (int phase = 0; phase < num_phases; ++phase) {
    lock.unlock();
    try {
      execute(rank, calls, phase);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    lock.lock();
    if (staged) break;  // peers read only the slot's copies, which live until the last member leaves
    // Phase barrier, deliberately without timeout or abort: every member arrived and executes a
    // bounded copy/reduce, and none may leave while a peer may still read its buffers.
    if (++slot.phase_done[phase] == world) NotifyLocked();
    SpinUnderLock(lock, [&] { return slot.phase_done[phase] == world; }, changes_, world_->spin());
    cv_.wait(lock, [&] { return slot.phase_done[phase] == world; });
  }
  Leave(slot, seq);
  if (error) std::rethrow_exception(error);
}

// ---- point to point ----------------------------------------------------------------------------------

std::string GroupRendezvous::P2PName(const P2PEntry& e) const {
  const std::string peer = e.is_send               ? Str("send to rank ", e.dst)
                           : e.src == kAnySource ? std::string("recv from any rank")
                                                 : Str("recv from rank ", e.src);
  return Str(peer, " (tag ", e.tag, ", ", e.bytes, " B, ", e.dtype, ")");
}

std::shared_ptr<GroupRendezvous::P2PEntry> GroupRendezvous::TakeMatch(P2PQueue& queue, int src, int dst, int tag) {
  // Keys are (src, dst, tag): a wildcard on either side means looking at every source's queue for (dst, tag).
  P2PQueue::iterator best = queue.end();
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const auto& [s, d, t] = it->first;
    if (d != dst || t != tag || it->second.empty()) continue;
    if (s != src && s != kAnySource && src != kAnySource) continue;
    if (best == queue.end() || it->second.front()->seq < best->second.front()->seq) best = it;
  }
  if (best == queue.end()) return nullptr;
  std::shared_ptr<P2PEntry> e = best->second.front();
  best->second.pop_front();
  if (best->second.empty()) queue.erase(best);
  return e;
}

std::shared_ptr<GroupRendezvous::P2PEntry> GroupRendezvous::Post(
    int rank, const P2POp& op,
    std::vector<std::pair<std::shared_ptr<P2PEntry>, std::shared_ptr<P2PEntry>>>& pairs) {
  const bool is_send = op.kind == P2POp::Kind::kSend;
  auto e = std::make_shared<P2PEntry>();
  e->is_send = is_send;
  e->src = is_send ? rank : op.peer;
  e->dst = is_send ? op.peer : rank;
  e->tag = op.tag;
  e->bytes = op.tensor.numel() * ElementSize(op.tensor.dtype());
  e->dtype = op.tensor.dtype();
  e->seq = p2p_seq_++;
  if (is_send) {
    e->send_data = op.tensor.raw_data();
  } else {
    e->recv_data = op.tensor.raw_data();
  }
  // A send takes the earliest posted receive from it or from any rank; a receive from any rank takes the
  // earliest posted send to it (per tag), as MPI matches wildcards.
  P2PQueue& opposite = is_send ? pending_recvs_ : pending_sends_;
  if (std::shared_ptr<P2PEntry> partner = TakeMatch(opposite, e->src, e->dst, e->tag)) {
    partner->matched = e->matched = true;
    if (partner->blocked >= 0) world_->EndBlockedWait(std::exchange(partner->blocked, -1));  // no longer waits
    if (is_send) {
      partner->src = e->src;  // a receive from any rank learns its sender
    } else {
      e->src = partner->src;
    }
    pairs.emplace_back(is_send ? e : partner, is_send ? partner : e);
  } else {
    (is_send ? pending_sends_ : pending_recvs_)[{e->src, e->dst, e->tag}].push_back(e);
  }
  return e;
}

void GroupRendezvous::CancelPending(std::unique_lock<std::mutex>& lock,
                                    const std::vector<std::shared_ptr<P2PEntry>>& mine) {
  for (const auto& e : mine) {
    if (e->matched) continue;
    P2PQueue& queue = e->is_send ? pending_sends_ : pending_recvs_;
    auto it = queue.find({e->src, e->dst, e->tag});
    if (it == queue.end()) continue;
    std::erase(it->second, e);
    if (it->second.empty()) queue.erase(it);
  }
  // A matched entry is being copied by its partner right now (a bounded memcpy): wait for it.
  cv_.wait(lock, [&] {
    for (const auto& e : mine) {
      if (e->matched && !e->done) return false;
    }
    return true;
  });
}

void GroupRendezvous::RunP2P(int rank, const std::vector<P2POp>& ops, std::chrono::milliseconds timeout,
                             const std::string& label, int* any_source) {
  std::vector<std::shared_ptr<P2PEntry>> mine;
  std::vector<std::pair<std::shared_ptr<P2PEntry>, std::shared_ptr<P2PEntry>>> pairs;  // (send, recv)
  // Each op is counted on its channel before it is posted (wait_graph.h): a peer that reads the counts
  // meanwhile may miss this post, never see one that is not there.
  const int me = global_ranks_[static_cast<size_t>(rank)];
  const std::string issuer = P2PIssuerKey(key_);
  // The batch's life in the wait-for graph (wait_graph.h's NoteBatch): started once its posts are counted and made
  // (a batch with a receive from any rank, never counted on a channel, only when done), finished on every way out.
  struct Batch {
    ThreadsWorld& world;
    int me;
    const std::string& issuer;
    bool started = false;
    void Start() {
      if (!std::exchange(started, true)) world.NoteBatch(me, issuer, BatchEvent::kStarted);
    }
    ~Batch() {
      Start();
      world.NoteBatch(me, issuer, BatchEvent::kFinished);
    }
  } batch{*world_, me, issuer};
  const bool from_any = std::any_of(ops.begin(), ops.end(), [](const P2POp& op) { return op.peer == kAnySource; });
  std::vector<std::pair<std::string, int64_t>> channels;
  for (const P2POp& op : ops) {
    if (op.peer == kAnySource) {
      channels.emplace_back();
      continue;
    }
    std::string channel = P2POpChannel(key_, me, global_ranks_[static_cast<size_t>(op.peer)],
                                       op.kind == P2POp::Kind::kSend, op.tag);
    const int64_t index = world_->NotePosted(me, channel, issuer);
    channels.emplace_back(std::move(channel), index);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (world_->aborted()) TESSEL_FAIL(ErrorCode::kAborted, world_->abort_message(), " (p2p on ", label, " cancelled)");
  for (size_t i = 0; i < ops.size(); ++i) {
    mine.push_back(Post(rank, ops[i], pairs));
    std::tie(mine.back()->channel, mine.back()->channel_seq) = channels[i];
  }
  lock.unlock();
  if (!from_any) batch.Start();
  // This member completes the pairs it matched: one direct copy from the sender's buffer.
  for (auto& [send, recv] : pairs) {
    if (send->bytes != recv->bytes || send->dtype != recv->dtype) {
      send->error = recv->error = Str("p2p mismatch on ", label, ": rank ", send->src, " posted ",
                                      P2PName(*send), " but rank ", recv->dst, " posted ",
                                      P2PName(*recv));
    } else {
      ParallelCopy(recv->recv_data, send->send_data, send->bytes);
    }
  }
  lock.lock();
  for (auto& [send, recv] : pairs) send->done = recv->done = true;
  if (!pairs.empty()) NotifyLocked();
  auto all_done = [&] {
    for (const auto& e : mine) {
      if (!e->done) return false;
    }
    return true;
  };
  // An unmatched op whose peer's function already returned can never match.
  std::string gone;
  auto peer_gone = [&] {
    for (const auto& e : mine) {
      if (e->matched) continue;
      const int peer = e->is_send ? e->dst : e->src;
      if (peer == kAnySource) {  // gone once every other member is
        bool all = true;
        for (int r = 0; r < size() && all; ++r) {
          all = r == rank || world_->gone(global_ranks_[static_cast<size_t>(r)]);
        }
        if (!all) continue;
        gone = Str(P2PName(*e), ": every other rank already returned from RunRanks (or stopped) or called "
                   "destroy_process_group()");
        return true;
      }
      if (world_->gone(global_ranks_[static_cast<size_t>(peer)])) {
        gone = Str(P2PName(*e), ": rank ", peer, GoneReason(peer));
        return true;
      }
    }
    return false;
  };
  // About to block: one blocked call per unmatched op (the file comment), unregistered when matched (Post)
  // or when this call returns.
  struct Unregister {
    ThreadsWorld& world;
    const std::vector<std::shared_ptr<P2PEntry>>& entries;
    ~Unregister() {  // mu_ held on every path out
      for (const auto& e : entries) {
        if (e->blocked >= 0) world.EndBlockedWait(std::exchange(e->blocked, -1));
      }
    }
  } unregister{*world_, mine};
  bool found = false;
  for (const auto& e : mine) {
    if (e->matched || e->channel.empty()) continue;
    const int peer = global_ranks_[static_cast<size_t>(e->is_send ? e->dst : e->src)];
    e->blocked = world_->BeginBlockedWait({.rank = me, .thread = P2PPosterId(issuer), .key = e->channel,
                                           .seq = e->channel_seq, .call = P2PName(*e), .label = label,
                                           .members = {peer}, .issuer_key = issuer},
                                          &found);
  }
  if (found) {
    lock.unlock();
    world_->WakeAllGroups();
    lock.lock();
  }
  std::optional<std::string> deadlock;
  auto deadlocked = [&] {  // a verdict on an op still registered (so still unmatched)
    for (const auto& e : mine) {
      if (e->blocked >= 0 && (deadlock = world_->deadlock(e->channel, e->channel_seq))) return true;
    }
    return false;
  };
  // No spin here: pipeline sends/receives run on the comm thread while the rank thread computes on the same
  // core, and polling for the peer took that core (pp_1f1b_step_vs_unsharded 0.77 -> 0.66 with it).
  const bool finished = cv_.wait_until(
      lock, Clock::now() + timeout, [&] { return all_done() || world_->aborted() || deadlocked() || peer_gone(); });
  if (!finished || !all_done()) {
    std::string pending;
    for (const auto& e : mine) {
      if (!e->matched) pending += Str(pending.empty() ? "" : "; ", P2PName(*e));
    }
    CancelPending(lock, mine);
    if (world_->aborted()) TESSEL_FAIL(ErrorCode::kAborted, world_->abort_message(), " (p2p on ", label, " cancelled)");
    if (deadlock) TESSEL_FAIL(ErrorCode::kAborted, *deadlock);
    if (!gone.empty()) TESSEL_FAIL(ErrorCode::kAborted, "p2p on ", label, " cannot complete: ", gone);
    TESSEL_FAIL(ErrorCode::kDeadlineExceeded, "p2p on ", label, " timed out after ", timeout.count(),
                " ms: no matching peer call for ", pending);
  }
  for (const auto& e : mine) {
    if (!e->error.empty()) TESSEL_FAIL(ErrorCode::kAborted, e->error);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].peer == kAnySource) *any_source = mine[i]->src;
  }
}

// ---- world ---------------------------------------------------------------------------------------------

void ThreadsWorld::Abort(int global_rank, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;  // the first failure wins
    first_failed_rank_ = global_rank;
    abort_message_ = Str("rank ", global_rank, " failed: ", message);
    aborted_.store(true, std::memory_order_release);
  }
  rejoin_cv_.notify_all();
  WakeAllGroups();
}

void ThreadsWorld::MarkExited(int global_rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_.at(static_cast<size_t>(global_rank)) = true;
  }
  rejoin_cv_.notify_all();
  WakeAllGroups();
}

void ThreadsWorld::MarkDeparted(int global_rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    departed_.at(static_cast<size_t>(global_rank)) = true;
  }
  WakeAllGroups();
}

void ThreadsWorld::Rejoin(int global_rank, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto me = static_cast<size_t>(global_rank);
  departed_.at(me) = false;
  const int gen = ++generation_.at(me);
  rejoin_cv_.notify_all();
  std::string gone;
  const bool joined = rejoin_cv_.wait_for(lock, timeout, [&] {
    if (aborted_.load(std::memory_order_acquire)) return true;
    gone.clear();
    bool all = true;
    for (size_t r = 0; r < generation_.size(); ++r) {
      if (generation_[r] >= gen) continue;
      all = false;
      if (exited_[r]) gone += Str(gone.empty() ? "" : ", ", r);
    }
    return all || !gone.empty();
  });
  if (aborted_.load(std::memory_order_acquire)) {
    TESSEL_FAIL(ErrorCode::kAborted, abort_message_, " (while rank ", global_rank, " waited in init_process_group)");
  }
  TESSEL_CHECK_CODE(ErrorCode::kAborted, gone.empty(), "init_process_group on rank ", global_rank, ": rank(s) ", gone,
                    " returned from RunRanks without calling init_process_group again");
  if (!joined) {
    std::string missing;
    for (size_t r = 0; r < generation_.size(); ++r) {
      if (generation_[r] < gen) missing += Str(missing.empty() ? "" : ", ", r);
    }
    TESSEL_FAIL(ErrorCode::kDeadlineExceeded, "init_process_group on rank ", global_rank, " timed out after ",
                timeout.count(), " ms: rank(s) ", missing, " did not call init_process_group again");
  }
}

ThreadsWorld::Presence ThreadsWorld::presence(int global_rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (exited_.at(static_cast<size_t>(global_rank))) return Presence::kReturned;
  return departed_.at(static_cast<size_t>(global_rank)) ? Presence::kDeparted : Presence::kPresent;
}

void ThreadsWorld::WakeAllGroups() {
  std::vector<std::shared_ptr<GroupRendezvous>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, weak] : groups_) {
      if (auto group = weak.lock()) live.push_back(std::move(group));
    }
  }
  for (auto& group : live) group->WakeAll();
}

std::string ThreadsWorld::abort_message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_message_;
}

int ThreadsWorld::first_failed_rank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_failed_rank_;
}

// ---- deadlock detection ---------------------------------------------------------------------------

void ThreadsWorld::NoteIssued(int global_rank, const std::string& key, int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  IssueState& state = issued_[{global_rank, key}];
  state.thread = ThisThreadId();
  state.issued = std::max(state.issued, seq + 1);
}

int64_t ThreadsWorld::NotePosted(int global_rank, const std::string& channel, const std::string& issuer_key) {
  std::lock_guard<std::mutex> lock(mu_);
  return CountPost(issued_, global_rank, channel, issuer_key);
}

int64_t ThreadsWorld::NoteBatch(int global_rank, const std::string& issuer_key, BatchEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  return comm::NoteBatch(issued_, global_rank, issuer_key, event);
}

int64_t ThreadsWorld::BeginBlockedWait(BlockedCall wait, bool* found_deadlock) {
  if (wait.issuer_key.empty()) wait.thread = ThisThreadId();  // p2p: the caller names its queue
  std::optional<Deadlock> found;
  int64_t handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle = next_handle_++;
    const int rank = wait.rank;
    const BlockedCall& mine = blocked_.emplace(handle, std::move(wait)).first->second;
    if (WaitsOnAPeer(mine, issued_)) {  // else it cannot close a cycle (wait_graph.h)
      std::vector<BlockedCall> all;  // without the calls already judged: they are about to raise, not wait
      for (const auto& [h, b] : blocked_) {
        if (!deadlocks_.count({b.key, b.seq})) all.push_back(b);
      }
      found = FindDeadlock(all, issued_, rank, mine.thread);
    }
    if (found) {
      for (const auto& call : found->calls) deadlocks_.emplace(call, found->message);
    }
  }
  if (found_deadlock != nullptr) {
    *found_deadlock = *found_deadlock || found.has_value();
  } else if (found) {
    WakeAllGroups();
  }
  return handle;
}

void ThreadsWorld::EndBlockedWait(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  blocked_.erase(handle);
}

std::optional<std::string> ThreadsWorld::deadlock(const std::string& key, int64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = deadlocks_.find({key, seq});
  if (it == deadlocks_.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<GroupRendezvous> ThreadsWorld::GetOrCreateGroup(const std::shared_ptr<ThreadsWorld>& self,
                                                                const std::string& key,
                                                                const std::vector<int>& global_ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  std::weak_ptr<GroupRendezvous>& slot = groups_[key];
  if (auto existing = slot.lock()) {
    TESSEL_INTERNAL_ASSERT(existing->global_ranks() == global_ranks, "group key ", key, " reused");
    return existing;
  }
  auto group = std::make_shared<GroupRendezvous>(self, key, global_ranks);
  slot = group;
  return group;
}

}  // namespace tessel::comm::threads_internal
