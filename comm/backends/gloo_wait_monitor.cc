// comm/backends/gloo_wait_monitor.cc — WaitMonitor: snapshots of blocked callers in the store, the cycle
// search of comm/wait_graph.h over all of them, and the verdicts (see the header).
#include "comm/backends/gloo_wait_monitor.h"

#include <algorithm>
#include <sstream>
#include <thread>
#include <utility>

#include "core/base/error.h"

namespace tessel::comm::gloo_internal {
namespace {

constexpr std::chrono::milliseconds kStoreTimeout{5000};

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }
std::string Text(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

// Snapshot lines: "I\t<key>\t<thread>\t<issued>\t<queued>\t<finished>\t<feeder>" and
// "B\t<thread>\t<key>\t<seq>\t<call>\t<label>\t<m,m,...>\t<issuer key>\t<local target>" (the issuer key empty
// for collectives, the local target for all but a caller's wait for its own sends and receives).
void Parse(const std::string& text, int rank, std::vector<BlockedCall>* blocked, IssueMap* issued) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
    if (f.size() >= 4 && f.size() <= 7 && f[0] == "I") {
      IssueState& state = (*issued)[{rank, f[1]}];
      state = {std::stoull(f[2]), std::stoll(f[3])};
      if (f.size() >= 5) state.queued = std::stoll(f[4]);
      if (f.size() >= 6) state.finished = std::stoll(f[5]);
      if (f.size() >= 7) state.feeder = std::stoull(f[6]);
    } else if (f.size() >= 7 && f.size() <= 9 && f[0] == "B") {
      BlockedCall b{.rank = rank, .thread = std::stoull(f[1]), .key = f[2], .seq = std::stoll(f[3]), .call = f[4],
                    .label = f[5], .issuer_key = f.size() >= 8 ? f[7] : ""};
      if (f.size() == 9 && !f[8].empty()) b.local_target = std::stoull(f[8]);
      std::istringstream members(f[6]);
      for (std::string m; std::getline(members, m, ',');) b.members.push_back(std::stoi(m));
      blocked->push_back(std::move(b));
    }
  }
}

}  // namespace

WaitMonitor::WaitMonitor(std::shared_ptr<Store> store, std::string prefix, int global_rank, int world_size)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(global_rank), world_size_(world_size) {
  thread_ = std::thread([this] { Run(); });
}

WaitMonitor::~WaitMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WaitMonitor::NoteIssued(const std::string& key, int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  IssueState& state = issued_[{rank_, key}];
  state.thread = ThisThreadId();
  state.issued = std::max(state.issued, seq + 1);
}

int64_t WaitMonitor::NotePosted(const std::string& channel, const std::string& issuer_key) {
  std::lock_guard<std::mutex> lock(mu_);
  return CountPost(issued_, rank_, channel, issuer_key);
}

std::optional<std::string> WaitMonitor::Exited(int global_rank) const {
  if (exit_prefix_.empty()) return std::nullopt;
  const std::string key = Str(exit_prefix_, global_rank);
  if (!store_->Check(key)) return std::nullopt;
  return Text(store_->Get(key, kStoreTimeout));
}

int64_t WaitMonitor::NoteBatch(const std::string& issuer_key, BatchEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  return comm::NoteBatch(issued_, rank_, issuer_key, event);
}

int64_t WaitMonitor::BeginBlockedWait(BlockedCall wait) {
  wait.rank = rank_;
  if (wait.issuer_key.empty()) wait.thread = ThisThreadId();  // p2p: the caller names its queue
  std::lock_guard<std::mutex> lock(mu_);
  blocked_.emplace(next_handle_, std::make_pair(std::move(wait), Clock::now()));
  return next_handle_++;
}

void WaitMonitor::EndBlockedWait(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  blocked_.erase(handle);
}

void WaitMonitor::BeginExchange(const std::string& key, int64_t seq,
                                std::vector<gloo::transport::UnboundBuffer*> buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& registered = exchanges_[{key, seq}] = std::move(buffers);
  if (verdicts_.count({key, seq})) {
    for (gloo::transport::UnboundBuffer* b : registered) b->abortWaitRecv(), b->abortWaitSend();
  }
}

void WaitMonitor::EndExchange(const std::string& key, int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  exchanges_.erase({key, seq});
}

std::optional<std::string> WaitMonitor::deadlock(const std::string& key, int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = verdicts_.find({key, seq});
  if (it == verdicts_.end()) return std::nullopt;
  return it->second;
}

// Each rank marks its calls' verdicts seen (deadlock-seen/<call>) once it has read them; the rank that found the
// deadlock waits (a few periods at most) until every other call's owner has, before it raises and exits: a peer
// whose round had not read the verdict yet saw this rank's connections close, reported "the process exited or
// died", and the launcher named it (the store may also live in this very process and go with it).
void WaitMonitor::AwaitPeersSawVerdict(
    const std::vector<std::pair<std::pair<std::string, int64_t>, std::string>>& found,
    const std::vector<BlockedCall>& mine, bool told) {
  auto seen_key = [&](const std::string& key, int64_t seq) { return Str(prefix_, "deadlock-seen/", key, "/", seq); };
  for (const BlockedCall& b : mine) store_->Set(seen_key(b.key, b.seq), Bytes("1"));
  if (told) return;
  const Clock::time_point deadline = Clock::now() + 3 * kPeriod;
  for (const auto& [call, verdict] : found) {
    const bool own = std::any_of(mine.begin(), mine.end(), [&, &c = call](const BlockedCall& b) {
      return b.key == c.first && b.seq == c.second;
    });
    while (!own && !store_->Check(seen_key(call.first, call.second)) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::optional<std::string> WaitMonitor::PublishedDeadlock(const std::string& key, int64_t seq) {
  if (std::optional<std::string> v = deadlock(key, seq)) return v;
  const std::string stored = Str(prefix_, "deadlock/", key, "/", seq);
  try {
    if (!store_->Check(stored)) return std::nullopt;
    std::string verdict = Text(store_->Get(stored, kStoreTimeout));
    std::lock_guard<std::mutex> lock(mu_);
    Record({key, seq}, verdict);
    return verdict;
  } catch (const std::exception&) {  // best effort: the store's host may be the rank that is gone
    return std::nullopt;
  }
}

void WaitMonitor::BeginTransfer(const std::string& key, int64_t seq,
                                std::vector<gloo::transport::UnboundBuffer*> buffers,
                                std::function<std::vector<int>()> probe) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto [it, added] = transfers_.try_emplace({key, seq}, Transfer{{}, std::move(probe), Clock::now(), {}});
  it->second.buffers = std::move(buffers);  // a later call adds the buffers posted since (same start)
  if (!it->second.dead.empty()) {
    for (gloo::transport::UnboundBuffer* b : it->second.buffers) b->abortWaitRecv(), b->abortWaitSend();
  }
}

std::vector<int> WaitMonitor::EndTransfer(const std::string& key, int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = transfers_.find({key, seq});
  if (it == transfers_.end()) return {};
  std::vector<int> dead = std::move(it->second.dead);
  transfers_.erase(it);
  return dead;
}

void WaitMonitor::ProbeTransfers() {
  const Clock::time_point now = Clock::now();
  for (auto& [call, t] : transfers_) {
    if (!t.dead.empty() || now - t.start < kProbeAfter) continue;
    t.dead = t.probe();
    if (t.dead.empty()) continue;
    for (gloo::transport::UnboundBuffer* b : t.buffers) b->abortWaitRecv(), b->abortWaitSend();
  }
}

void WaitMonitor::Record(const std::pair<std::string, int64_t>& call, const std::string& verdict) {
  verdicts_.emplace(call, verdict);
  const auto it = exchanges_.find(call);
  if (it == exchanges_.end()) return;
  for (gloo::transport::UnboundBuffer* b : it->second) b->abortWaitRecv(), b->abortWaitSend();
}

std::string WaitMonitor::Snapshot() const {
  std::string out;
  for (const auto& [where, state] : issued_) {
    out += Str("I\t", where.second, "\t", state.thread, "\t", state.issued, "\t", state.queued, "\t", state.finished,
               "\t", state.feeder, "\n");
  }
  for (const auto& [handle, entry] : blocked_) {
    const BlockedCall& b = entry.first;
    std::string members;
    for (int m : b.members) members += Str(members.empty() ? "" : ",", m);
    out += Str("B\t", b.thread, "\t", b.key, "\t", b.seq, "\t", b.call, "\t", b.label, "\t", members, "\t",
               b.issuer_key, "\t", b.local_target ? Str(*b.local_target) : "", "\n");
  }
  return out;
}

void WaitMonitor::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kPeriod, [&] { return stop_; });
    if (stop_) break;
    ProbeTransfers();  // the probes only poll buffers (no store, no blocking)
    try {
      Round(lock);
    } catch (const std::exception&) {
      // Detection is best effort: a store that is gone (shutdown) leaves the group timeout in charge.
      if (!lock.owns_lock()) lock.lock();
    }
  }
}

void WaitMonitor::Round(std::unique_lock<std::mutex>& lock) {
  std::vector<BlockedCall> mine;
  bool long_wait = false;
  for (const auto& [handle, entry] : blocked_) {
    if (verdicts_.count({entry.first.key, entry.first.seq})) continue;  // about to raise (header comment)
    mine.push_back(entry.first);
    long_wait = long_wait || Clock::now() - entry.second >= kQuiet;
  }
  const std::string wait_key = Str(prefix_, "wait/", rank_);
  if (!long_wait) {
    if (published_.empty() || !mine.empty()) return;
    published_.clear();  // nothing blocked any more: withdraw the snapshot peers might still read
    lock.unlock();
    store_->Set(wait_key, Bytes("\n"));
    lock.lock();
    return;
  }
  const std::string snapshot = Snapshot();
  const bool publish = snapshot != published_;
  published_ = snapshot;
  IssueMap issued = issued_;
  lock.unlock();
  if (publish) store_->Set(wait_key, Bytes(snapshot));
  std::vector<std::pair<std::pair<std::string, int64_t>, std::string>> found;
  for (const BlockedCall& b : mine) {  // a verdict another rank found for one of my calls
    const std::string key = Str(prefix_, "deadlock/", b.key, "/", b.seq);
    if (store_->Check(key)) found.push_back({{b.key, b.seq}, Text(store_->Get(key, kStoreTimeout))});
  }
  std::vector<BlockedCall> all = mine;
  for (int r = 0; r < world_size_ && found.empty(); ++r) {
    const std::string key = Str(prefix_, "wait/", r);
    if (r == rank_ || !store_->Check(key)) continue;
    std::vector<BlockedCall> theirs;
    Parse(Text(store_->Get(key, kStoreTimeout)), r, &theirs, &issued);
    for (BlockedCall& b : theirs) {  // a peer's call that has a verdict is about to raise, not to wait
      if (!store_->Check(Str(prefix_, "deadlock/", b.key, "/", b.seq))) all.push_back(std::move(b));
    }
  }
  const bool told = !found.empty();  // (another rank found it: this rank is one of the peers it waits for)
  for (size_t i = 0; i < mine.size() && found.empty(); ++i) {
    const std::optional<Deadlock> d = FindDeadlock(all, issued, rank_, mine[i].thread);
    if (!d) continue;
    for (const auto& call : d->calls) {
      const std::string key = Str(prefix_, "deadlock/", call.first, "/", call.second);
      if (!store_->Check(key)) store_->Set(key, Bytes(d->message));
      found.push_back({call, d->message});
    }
  }
  if (!found.empty()) {
    // Known here first (a wait that fails on a closed connection meanwhile reads it: gloo.cc's deadlock(key, seq)),
    // then the peers are given their time to read it, then the waits are aborted (Record).
    lock.lock();
    for (const auto& [call, verdict] : found) verdicts_.emplace(call, verdict);
    lock.unlock();
    AwaitPeersSawVerdict(found, mine, told);
  }
  lock.lock();
  for (const auto& [call, verdict] : found) Record(call, verdict);
}

P2PBatchWatch::P2PBatchWatch(WaitMonitor& monitor, const std::string& group_key, int global_rank)
    : monitor_(monitor), group_key_(group_key), issuer_(P2PIssuerKey(group_key)), rank_(global_rank) {}

P2PBatchWatch::~P2PBatchWatch() {
  if (!started_) monitor_.NoteBatch(issuer_, BatchEvent::kStarted);
  monitor_.NoteBatch(issuer_, BatchEvent::kFinished);
  for (int64_t h : handles_) monitor_.EndBlockedWait(h);
  for (const Op& op : ops_) monitor_.EndExchange(op.channel, op.index);
}

void P2PBatchWatch::Post(int peer, bool is_send, int tag, std::string call) {
  if (peer < 0) {
    any_source_ = true;
    return;
  }
  std::string channel = P2POpChannel(group_key_, rank_, peer, is_send, tag);
  const int64_t index = monitor_.NotePosted(channel, issuer_);
  ops_.push_back({std::move(channel), index, peer, std::move(call)});
}

void P2PBatchWatch::Block(const std::string& label) {
  if (!any_source_ && !std::exchange(started_, true)) {  // every post of the batch counted
    monitor_.NoteBatch(issuer_, BatchEvent::kStarted);
  }
  for (const Op& op : ops_) {
    handles_.push_back(monitor_.BeginBlockedWait({.thread = P2PPosterId(issuer_), .key = op.channel, .seq = op.index,
                                                  .call = op.call, .label = label, .members = {op.peer},
                                                  .issuer_key = issuer_}));
  }
}

void P2PBatchWatch::Watch(const std::vector<gloo::transport::UnboundBuffer*>& buffers) {
  for (const Op& op : ops_) monitor_.BeginExchange(op.channel, op.index, buffers);
}

std::optional<std::string> P2PBatchWatch::verdict() const {
  for (const Op& op : ops_) {
    if (std::optional<std::string> v = monitor_.deadlock(op.channel, op.index)) return v;
  }
  return std::nullopt;
}

}  // namespace tessel::comm::gloo_internal
