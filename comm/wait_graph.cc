// comm/wait_graph.cc — FindDeadlock: depth-first search of the wait-for graph (see wait_graph.h).
#include "comm/wait_graph.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string_view>
#include <thread>

#include "core/base/error.h"

namespace tessel::comm {
namespace {
constexpr std::string_view kCallerSuffix = "/caller";  // P2PCallerWait's key: the issuer key and this
}  // namespace

uint64_t ThisThreadId() { return std::hash<std::thread::id>{}(std::this_thread::get_id()); }

namespace {

class TrackedWork final : public Work {
 public:
  TrackedWork(WorkPtr inner, std::function<int64_t()> begin, std::function<void(int64_t)> end)
      : inner_(std::move(inner)), begin_(std::move(begin)), end_(std::move(end)) {}
  void Wait() override {
    if (inner_->IsCompleted()) return inner_->Wait();
    const int64_t handle = begin_();
    try {
      inner_->Wait();
    } catch (...) {
      end_(handle);
      throw;
    }
    end_(handle);
  }
  bool IsCompleted() override { return inner_->IsCompleted(); }

 private:
  WorkPtr inner_;
  std::function<int64_t()> begin_;
  std::function<void(int64_t)> end_;
};

}  // namespace

WorkPtr TrackBlockingWait(WorkPtr inner, std::function<int64_t()> begin, std::function<void(int64_t)> end) {
  return std::make_shared<TrackedWork>(std::move(inner), std::move(begin), std::move(end));
}

namespace {

// The thread of `member` when the blocked call `w` (of rank `self`) waits for it: `member` has not issued
// call w.seq of w's group yet. nullopt: no wait-for edge.
std::optional<uint64_t> WaitsFor(const BlockedCall& w, int self, int member, const IssueMap& issued) {
  if (member == self) return std::nullopt;
  auto it = issued.find({member, w.key});
  if (it == issued.end() && !w.issuer_key.empty()) {  // a p2p peer that never posted on this channel
    it = issued.find({member, w.issuer_key});
    if (it == issued.end()) return P2PPosterId(w.issuer_key);  // nor on the group: its queue is idle (Next)
    return it->second.thread;
  }
  if (it == issued.end() || it->second.issued > w.seq) return std::nullopt;
  return it->second.thread;
}

// The group key of a p2p issuer key (P2PIssuerKey).
std::string GroupOfIssuer(const std::string& issuer_key) {
  return issuer_key.substr(0, issuer_key.size() - std::string("/p2p").size());
}

// Whether the caller's wait `w` (P2PCallerWait) still waits for its queue: its batch has not finished.
bool CallerStillWaits(const BlockedCall& w, const IssueMap& issued) {
  const auto it = issued.find({w.rank, w.key.substr(0, w.key.size() - kCallerSuffix.size())});
  return it == issued.end() || it->second.finished <= w.seq;
}

// Where the edge from p2p call `w` to `member`'s `thread` leads: that thread, or, when it is the member's p2p
// queue and the queue is neither blocked nor holding a queued batch, the member's thread issuing on the group
// (only it can hand the queue what `w` waits for). nullopt when that thread is unknown.
std::optional<uint64_t> Next(const BlockedCall& w, int member, uint64_t thread, bool blocked,
                             const IssueMap& issued) {
  if (blocked || w.issuer_key.empty() || thread != P2PPosterId(w.issuer_key)) return thread;
  const auto queue = issued.find({member, w.issuer_key});
  if (queue != issued.end() && queue->second.queued > 0) return std::nullopt;
  if (queue != issued.end() && queue->second.feeder != 0) return queue->second.feeder;
  const auto feeder = issued.find({member, GroupOfIssuer(w.issuer_key)});  // it never handed a batch over
  if (feeder == issued.end()) return std::nullopt;
  return feeder->second.thread;
}

}  // namespace

bool WaitsOnAPeer(const BlockedCall& w, const IssueMap& issued) {
  if (w.local_target) return true;
  for (int member : w.members) {
    if (WaitsFor(w, w.rank, member, issued)) return true;
  }
  return false;
}

std::string P2PChannelKey(const std::string& group_key, int src, int dst, int tag) {
  return Str(group_key, "/p2p/", src, ">", dst, "/", tag);
}

std::string P2PIssuerKey(const std::string& group_key) { return Str(group_key, "/p2p"); }

uint64_t P2PPosterId(const std::string& issuer_key) { return std::hash<std::string>{}(issuer_key); }

int64_t NoteBatch(IssueMap& issued, int rank, const std::string& issuer_key, BatchEvent event) {
  IssueState& state = issued[{rank, issuer_key}];
  state.thread = P2PPosterId(issuer_key);
  switch (event) {
    case BatchEvent::kSubmitted:
      ++state.queued;
      state.feeder = ThisThreadId();
      return state.submitted++;
    case BatchEvent::kStarted:
      --state.queued;
      break;
    case BatchEvent::kFinished:
      ++state.finished;
      break;
  }
  return -1;
}

BlockedCall P2PCallerWait(int rank, const std::string& issuer_key, std::string label, int64_t ticket) {
  return BlockedCall{.rank = rank, .key = Str(issuer_key, kCallerSuffix), .seq = ticket,
                     .call = "its own sends and receives", .label = std::move(label),
                     .local_target = P2PPosterId(issuer_key)};
}

int64_t CountPost(IssueMap& issued, int rank, const std::string& channel, const std::string& issuer_key) {
  const uint64_t poster = P2PPosterId(issuer_key);
  issued[{rank, issuer_key}].thread = poster;
  IssueState& state = issued[{rank, channel}];
  state.thread = poster;
  return state.issued++;
}

std::optional<Deadlock> FindDeadlock(std::span<const BlockedCall> blocked, const IssueMap& issued, int start_rank,
                                     uint64_t start_thread) {
  using Node = std::pair<int, uint64_t>;
  std::map<Node, std::vector<const BlockedCall*>> waiting;  // a p2p thread may wait on several ops of a batch
  for (const BlockedCall& b : blocked) waiting[{b.rank, b.thread}].push_back(&b);
  const Node start{start_rank, start_thread};
  if (!waiting.count(start)) return std::nullopt;
  struct Step {
    const BlockedCall* wait;
    int waits_for;
  };
  std::vector<Step> path;
  std::set<Node> visited = {start};
  // Along "blocked thread -> the thread that must issue what it waits for", back to `start`.
  std::function<bool(const Node&)> reaches_start = [&](const Node& n) {
    for (const BlockedCall* w : waiting.at(n)) {
      std::vector<std::pair<int, std::optional<uint64_t>>> targets;
      if (w->local_target && CallerStillWaits(*w, issued)) targets.emplace_back(n.first, *w->local_target);
      for (int member : w->members) {
        const std::optional<uint64_t> thread = WaitsFor(*w, n.first, member, issued);
        if (!thread) continue;
        const bool blocked = waiting.count({member, *thread}) > 0;
        targets.emplace_back(member, Next(*w, member, *thread, blocked, issued));
      }
      for (const auto& [member, thread] : targets) {
        if (!thread) continue;
        const Node next{member, *thread};
        path.push_back({w, member});
        if (next == start) return true;
        if (waiting.count(next) && visited.insert(next).second && reaches_start(next)) return true;
        path.pop_back();
      }
    }
    return false;
  };
  if (!reaches_start(start)) return std::nullopt;
  std::rotate(path.begin(), std::min_element(path.begin(), path.end(), [](const Step& a, const Step& b) {
                return a.wait->rank < b.wait->rank;
              }), path.end());
  Deadlock d{.message = "deadlock: "};
  bool p2p = false, collective = false;
  for (const Step& step : path) {
    // A caller's wait for its own queue: the queue's step says what it waits on, and the queue's call is the one
    // that raises (the caller's Wait then rethrows it).
    if (step.wait->local_target) continue;
    const bool is_p2p = !step.wait->issuer_key.empty();
    (is_p2p ? p2p : collective) = true;
    d.message += Str(d.calls.empty() ? "" : "; ", "rank ", step.wait->rank, " waits in ", step.wait->call,
                     " on ", step.wait->label, " for rank ", step.waits_for,
                     is_p2p ? ", which has not posted its side" : ", which has not issued it");
    d.calls.emplace_back(step.wait->key, step.wait->seq);
  }
  d.message += ". Every one of them is blocked waiting for the next, so none can ever issue what the other needs: ";
  if (collective && !p2p) {
    d.message += "ranks issued collectives on different groups in different orders (issue them in the same order on "
                 "every rank)";
  } else if (collective) {
    d.message += "a send or receive waits for a rank that is inside a collective (a rank ran one more step of sends "
                 "and receives than its peer, or left one midway, and the peer went on to the collective)";
  } else {
    d.message += "a rank left a step of sends and receives midway (after an exception: its peers are still inside "
                 "the step, and the groups must be rebuilt) or ranks post sends and receives in orders that wait on "
                 "each other (post each exchange as one batch_isend_irecv)";
  }
  return d;
}

}  // namespace tessel::comm
