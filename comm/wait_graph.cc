// comm/wait_graph.cc — FindDeadlock: depth-first search of the wait-for graph (see wait_graph.h).
#include "comm/wait_graph.h"

#include <algorithm>
#include <functional>
#include <set>
#include <thread>

#include "core/base/error.h"

namespace tessel::comm {

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
    if (it == issued.end()) return std::nullopt;
    return it->second.thread;
  }
  if (it == issued.end() || it->second.issued > w.seq) return std::nullopt;
  return it->second.thread;
}

}  // namespace

bool WaitsOnAPeer(const BlockedCall& w, const IssueMap& issued) {
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
      for (int member : w->members) {
        const std::optional<uint64_t> thread = WaitsFor(*w, n.first, member, issued);
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
    const bool is_p2p = !step.wait->issuer_key.empty();
    (is_p2p ? p2p : collective) = true;
    d.message += Str(&step == &path.front() ? "" : "; ", "rank ", step.wait->rank, " waits in ", step.wait->call,
                     " on ", step.wait->label, " for rank ", step.waits_for,
                     is_p2p ? ", which has not posted its side" : ", which has not issued it");
    d.calls.emplace_back(step.wait->key, step.wait->seq);
  }
  d.message += ". Every one of them is blocked waiting for the next, so none can ever issue what the other needs: ";
  if (collective) {
    d.message += "ranks issued collectives on different groups in different orders (issue them in the same order on "
                 "every rank)";
  }
  if (p2p) {
    d.message += Str(collective ? "; " : "", "a rank left a step of sends and receives midway (after an exception: "
                     "its peers are still inside the step, and the groups must be rebuilt) or ranks post sends and "
                     "receives in orders that wait on each other (post each exchange as one batch_isend_irecv)");
  }
  return d;
}

}  // namespace tessel::comm
