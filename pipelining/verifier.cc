// pipelining/verifier.cc — see verifier.h. Both checks visit actions step-major (step 0 of every rank, then
// step 1, ...) so the first bad action reported is the earliest one on the grid, lowest rank first.
#include "pipelining/verifier.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "core/base/error.h"
#include "pipelining/dependencies.h"
#include "pipelining/lowering.h"

namespace tessel::pipelining {
namespace {

struct Where {
  int rank = 0;
  int step = 0;
};

[[noreturn]] void RejectAt(const Program& p, Where w, const Action& a, const std::string& what) {
  TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline program: rank ", w.rank, ", step ", w.step, ": action ",
              ToString(a), " ", what, "\n", FormatProgram(p, w.step));
}

// Calls fn(where, action) for every non-idle slot, step-major.
template <typename Fn>
void ForEachStepMajor(const Program& p, Fn&& fn) {
  size_t steps = 0;
  for (const RankProgram& r : p) steps = std::max(steps, r.size());
  for (size_t t = 0; t < steps; ++t) {
    for (size_t r = 0; r < p.size(); ++r) {
      if (t < p[r].size() && p[r][t].has_value()) fn(Where{static_cast<int>(r), static_cast<int>(t)}, *p[r][t]);
    }
  }
}

// Per (stage, microbatch) compute progress: F, then B or I, then W after I; nothing twice.
class ComputeTracker {
 public:
  explicit ComputeTracker(int num_stages) : counts_(num_stages) {}

  // The reason `a` may not run now, or an empty string after recording it.
  std::string Apply(const Action& a) {
    State& st = state_[{a.stage, *a.microbatch}];
    const int s = a.stage, m = *a.microbatch;
    switch (a.kind) {
      case ActionKind::kForward:
        if (st.f) return Str("runs twice (microbatch ", m, " was already forwarded through stage ", s, ")");
        st.f = true;
        break;
      case ActionKind::kFullBackward:
      case ActionKind::kBackwardInput:
        if (!st.f) return Str("runs before its forward ", ToString(F(s, m)));
        if (st.b || st.i) return Str("is a second backward of microbatch ", m, " on stage ", s);
        (a.kind == ActionKind::kFullBackward ? st.b : st.i) = true;
        break;
      case ActionKind::kBackwardWeight:
        if (!st.i) return Str("runs before its backward-input ", ToString(I(s, m)));
        if (st.w) return Str("runs twice (weight gradient of microbatch ", m, " on stage ", s, ")");
        st.w = true;
        break;
      default:
        return "";
    }
    ++counts_[s][static_cast<int>(a.kind)];
    return "";
  }
  int Count(int stage, ActionKind kind) const { return counts_[stage][static_cast<int>(kind)]; }
  bool Has(const Action& a) const {
    auto it = state_.find({a.stage, a.microbatch.value_or(-1)});
    if (it == state_.end()) return false;
    switch (a.kind) {
      case ActionKind::kForward: return it->second.f;
      case ActionKind::kFullBackward: return it->second.b;
      case ActionKind::kBackwardInput: return it->second.i;
      case ActionKind::kBackwardWeight: return it->second.w;
      default: return false;
    }
  }

 private:
  struct State {
    bool f = false, b = false, i = false, w = false;
  };
  std::map<std::pair<int, int>, State> state_;
  std::vector<std::array<int, 4>> counts_;  // per stage, indexed by F, B, I, W
};

// Stage and microbatch ranges, and microbatch presence by kind.
void CheckIndices(const Program& p, Where w, const Action& a, int num_stages, int num_microbatches) {
  if (a.stage < 0 || a.stage >= num_stages) {
    RejectAt(p, w, a, Str("names stage ", a.stage, " outside the ", num_stages, "-stage pipeline"));
  }
  if (HasMicrobatch(a.kind) != a.microbatch.has_value()) {
    RejectAt(p, w, a, HasMicrobatch(a.kind) ? "has no microbatch index" : "must not carry a microbatch index");
  }
  if (a.microbatch.has_value() && (*a.microbatch < 0 || *a.microbatch >= num_microbatches)) {
    RejectAt(p, w, a, Str("names microbatch ", *a.microbatch, " outside [0, ", num_microbatches, ")"));
  }
}

// Every stage saw m forwards and m backwards (B, or I and W in equal number).
void CheckCounts(const ComputeTracker& t, std::span<const int> stage_to_rank, int num_microbatches) {
  for (int s = 0; s < static_cast<int>(stage_to_rank.size()); ++s) {
    const int f = t.Count(s, ActionKind::kForward), b = t.Count(s, ActionKind::kFullBackward);
    const int i = t.Count(s, ActionKind::kBackwardInput), w = t.Count(s, ActionKind::kBackwardWeight);
    const std::string where = Str("pipeline program: stage ", s, " (rank ", stage_to_rank[s], ") ");
    TESSEL_CHECK(f == num_microbatches, where, "has ", f, " forwards, expected one per microbatch (",
                 num_microbatches, ")");
    TESSEL_CHECK(i == w, where, "has ", i, " backward-input (I) but ", w, " backward-weight (W) actions");
    TESSEL_CHECK(b + i == num_microbatches, where, "has ", b + i, " backwards (B=", b, ", I=", i,
                 "), expected one per microbatch (", num_microbatches, ")");
  }
}

// What `a` waits for before it can run: data dependencies, where a producer on another rank is replaced by
// the SEND that carries its output when the program is lowered.
std::vector<std::vector<Action>> WaitsFor(const Action& a, std::span<const int> stage_to_rank, bool lowered) {
  std::vector<std::vector<Action>> deps = DataDependencies(a, static_cast<int>(stage_to_rank.size()));
  if (!lowered) return deps;
  for (auto& alternatives : deps) {
    for (Action& d : alternatives) {
      if (stage_to_rank[d.stage] == stage_to_rank[a.stage]) continue;
      d = Action{d.stage, d.kind == ActionKind::kForward ? ActionKind::kSendF : ActionKind::kSendB, d.microbatch};
    }
  }
  return deps;
}

// Runs every rank as far as its waits allow; a program that stops short has a cycle of waits (or waits for
// something never issued) and is rejected at the first blocked rank.
void CheckNoWaitCycle(const Program& p, std::span<const int> stage_to_rank, bool lowered) {
  std::set<Action> done;
  std::vector<size_t> next(p.size(), 0);
  auto skip_idle = [&](size_t r) {
    while (next[r] < p[r].size() && !p[r][next[r]].has_value()) ++next[r];
  };
  auto blocker = [&](const Action& a) -> std::optional<std::vector<Action>> {
    for (const auto& alternatives : WaitsFor(a, stage_to_rank, lowered)) {
      if (std::none_of(alternatives.begin(), alternatives.end(), [&](const Action& d) { return done.count(d); })) {
        return alternatives;
      }
    }
    return std::nullopt;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < p.size(); ++r) {
      for (skip_idle(r); next[r] < p[r].size() && !blocker(*p[r][next[r]]).has_value(); skip_idle(r)) {
        done.insert(*p[r][next[r]++]);
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < p.size(); ++r) {
    if (next[r] >= p[r].size()) continue;
    const Action& a = *p[r][next[r]];
    std::string waits;
    const std::vector<Action> producers = *blocker(a);  // a copy: the optional is a temporary
    for (const Action& d : producers) waits += Str(waits.empty() ? "" : " or ", ToString(d));
    RejectAt(p, Where{static_cast<int>(r), static_cast<int>(next[r])}, a,
             Str("waits for ", waits, ", which can never run before it (a cycle of waits, or it is missing)"));
  }
}

// The executor's comm model (executor.cc, comm/): each run of consecutive SEND/RECV actions on a rank is
// one batch, posted when the rank's program reaches it and run by the rank's comm thread after every earlier
// batch; a batch completes once the peer op of each of its ops has been posted by the peer's comm thread
// (the threads backend matches a send with its receive; a gloo receive needs its send). A compute action that
// consumes a receive waits for that receive's batch. CheckNoWaitCycle treats every SEND and RECV as
// independent, which accepted programs whose early RECV batch waits on a SEND queued behind it on the same
// rank: they passed and then timed out in the executor. Rejects a program that cannot finish under this model.
void CheckCommBatchesFinish(const Program& p, std::span<const int> stage_to_rank) {
  const size_t n = p.size();
  const int num_stages = static_cast<int>(stage_to_rank.size());
  std::vector<RankProgram> prog(n);
  std::vector<std::vector<std::pair<int, int>>> batches(n);
  std::map<Action, std::pair<size_t, size_t>> batch_of;  // comm action -> (rank, batch)
  for (size_t r = 0; r < n; ++r) {
    for (const auto& slot : p[r]) {
      if (slot.has_value()) prog[r].push_back(slot);
    }
    batches[r] = CommBatches(prog[r]);
    for (size_t b = 0; b < batches[r].size(); ++b) {
      for (int i = batches[r][b].first; i < batches[r][b].second; ++i) batch_of[*prog[r][i]] = {r, b};
    }
  }
  auto peer_op = [](const Action& a) -> Action {
    switch (a.kind) {
      case ActionKind::kSendF: return {a.stage + 1, ActionKind::kRecvF, a.microbatch};
      case ActionKind::kRecvF: return {a.stage - 1, ActionKind::kSendF, a.microbatch};
      case ActionKind::kSendB: return {a.stage - 1, ActionKind::kRecvB, a.microbatch};
      default: return {a.stage + 1, ActionKind::kSendB, a.microbatch};  // kRecvB
    }
  };
  std::vector<size_t> pc(n, 0), posted(n, 0), completed(n, 0);
  std::set<Action> done;
  auto received = [&](size_t r, const Action& recv) {
    auto it = batch_of.find(recv);
    return it != batch_of.end() && it->second.first == r && it->second.second < completed[r];
  };
  // What compute action `a` on rank r still waits for (nullopt: it can run).
  auto compute_blocker = [&](size_t r, const Action& a) -> std::optional<Action> {
    for (const auto& alternatives : DataDependencies(a, num_stages)) {
      bool ok = false;
      for (const Action& d : alternatives) {
        if (static_cast<size_t>(stage_to_rank[d.stage]) == r) {
          ok = ok || done.count(d) > 0;
        } else {
          const Action recv{a.stage, d.stage < a.stage ? ActionKind::kRecvF : ActionKind::kRecvB, a.microbatch};
          ok = ok || received(r, recv);
        }
      }
      if (!ok) {
        const Action& d = alternatives.front();
        if (static_cast<size_t>(stage_to_rank[d.stage]) == r) return d;
        return Action{a.stage, d.stage < a.stage ? ActionKind::kRecvF : ActionKind::kRecvB, a.microbatch};
      }
    }
    return std::nullopt;
  };
  // The op of rank r's head batch whose peer op has not been posted yet (nullopt: the batch completes).
  auto batch_blocker = [&](size_t r) -> std::optional<Action> {
    const auto [begin, end] = batches[r][completed[r]];
    for (int i = begin; i < end; ++i) {
      const Action peer = peer_op(*prog[r][i]);
      auto it = batch_of.find(peer);
      if (it == batch_of.end()) return peer;
      const auto [pr, pb] = it->second;
      if (!(pb < posted[pr] && pb <= completed[pr])) return peer;
    }
    return std::nullopt;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      while (pc[r] < prog[r].size()) {
        const Action& a = *prog[r][pc[r]];
        if (IsComm(a.kind)) {
          pc[r] = static_cast<size_t>(batches[r][posted[r]++].second);  // posting never blocks
        } else if (!compute_blocker(r, a).has_value()) {
          done.insert(a);
          ++pc[r];
        } else {
          break;
        }
        progress = true;
      }
      while (completed[r] < posted[r] && !batch_blocker(r).has_value()) {
        ++completed[r];
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (completed[r] < posted[r]) {
      const auto [begin, end] = batches[r][completed[r]];
      std::string ops;
      for (int i = begin; i < end; ++i) ops += Str(ops.empty() ? "" : ",", ToString(*prog[r][i]));
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline program: rank ", r, "'s comm batch [", ops, "] waits for ",
                  ToString(*batch_blocker(r)), ", which its rank never posts while this batch is pending (the ",
                  "executor runs a rank's comm batches in order): a cycle of waits that would end in a timeout");
    }
    if (pc[r] < prog[r].size()) {
      const Action& a = *prog[r][pc[r]];
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline program: rank ", r, "'s ", ToString(a), " waits for ",
                  ToString(*compute_blocker(r, a)), ", which can never complete before it under the executor's ",
                  "in-order comm batches: a cycle of waits that would end in a timeout");
    }
  }
}

// The per-action checks of a lowered program, in step-major order.
class LoweredChecker {
 public:
  LoweredChecker(const Program& p, std::span<const int> stage_to_rank, int num_microbatches)
      : p_(p), rank_of_(stage_to_rank), m_(num_microbatches), tracker_(static_cast<int>(stage_to_rank.size())),
        seen_(p.size()) {}

  void Check(Where w, const Action& a) {
    CheckIndices(p_, w, a, num_stages(), m_);
    if (rank_of_[a.stage] != w.rank) {
      RejectAt(p_, w, a, Str("runs stage ", a.stage, " on rank ", w.rank, " but stage_to_rank puts it on rank ",
                             rank_of_[a.stage]));
    }
    if (IsCompute(a.kind)) {
      if (ever_unsharded_.count(a.stage) && !unsharded_.count(a.stage)) {
        RejectAt(p_, w, a, Str("computes on stage ", a.stage, " while its parameters are resharded (no UNSHARD "
                               "since the last RESHARD)"));
      }
      CheckInput(w, a);
      if (std::string why = tracker_.Apply(a); !why.empty()) RejectAt(p_, w, a, why);
    } else if (IsComm(a.kind)) {
      CheckComm(w, a);
    } else {
      CheckStageAction(w, a);
    }
    seen_[w.rank].insert(a);
  }

  // After the pass: every SEND has its RECV and every RECV its SEND; every stage resharded; counts right.
  void Finish() {
    ForEachStepMajor(p_, [&](Where w, const Action& a) {
      if (!IsComm(a.kind)) return;
      const Action peer = Peer(a);
      if (!comm_at_.count(peer)) {
        RejectAt(p_, w, a, Str("has no matching ", ActionKindName(peer.kind), " ", ToString(peer), " on rank ",
                               rank_of_[peer.stage]));
      }
    });
    for (int s : unsharded_) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline program: stage ", s, " (rank ", rank_of_[s],
                  ") is still unsharded at the end of its program (no RESHARD after the last UNSHARD)\n",
                  FormatProgram(p_));
    }
    CheckCounts(tracker_, rank_of_, m_);
  }

 private:
  int num_stages() const { return static_cast<int>(rank_of_.size()); }
  bool Remote(int stage, int neighbour) const { return rank_of_[neighbour] != rank_of_[stage]; }

  // The comm action on the other rank that pairs with `a`.
  static Action Peer(const Action& a) {
    switch (a.kind) {
      case ActionKind::kSendF: return {a.stage + 1, ActionKind::kRecvF, a.microbatch};
      case ActionKind::kRecvF: return {a.stage - 1, ActionKind::kSendF, a.microbatch};
      case ActionKind::kSendB: return {a.stage - 1, ActionKind::kRecvB, a.microbatch};
      default: return {a.stage + 1, ActionKind::kSendB, a.microbatch};
    }
  }

  // A compute's input is received on this rank (or produced here, at the bottom of a V) before it runs.
  void CheckInput(Where w, const Action& a) {
    const int s = a.stage, m = *a.microbatch;
    const bool backward = a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput;
    if (a.kind == ActionKind::kForward && s > 0) {
      if (Remote(s, s - 1) && !seen_[w.rank].count(Action{s, ActionKind::kRecvF, m})) {
        RejectAt(p_, w, a, Str("runs before its ", ToString(Action{s, ActionKind::kRecvF, m}), " on this rank"));
      }
      if (!Remote(s, s - 1) && !tracker_.Has(F(s - 1, m))) {
        RejectAt(p_, w, a, Str("runs before ", ToString(F(s - 1, m)), " of the previous stage on the same rank"));
      }
    } else if (backward && s + 1 < num_stages()) {
      if (Remote(s, s + 1) && !seen_[w.rank].count(Action{s, ActionKind::kRecvB, m})) {
        RejectAt(p_, w, a, Str("runs before its ", ToString(Action{s, ActionKind::kRecvB, m}), " on this rank"));
      }
      if (!Remote(s, s + 1) && !tracker_.Has(B(s + 1, m)) && !tracker_.Has(I(s + 1, m))) {
        RejectAt(p_, w, a, Str("runs before the backward of stage ", s + 1, " (same rank) for microbatch ", m));
      }
    }
  }

  void CheckComm(Where w, const Action& a) {
    const int s = a.stage, m = *a.microbatch;
    const bool forward = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
    const bool send = a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
    const int peer = forward == send ? s + 1 : s - 1;
    if (peer < 0 || peer >= num_stages()) {
      RejectAt(p_, w, a, Str("talks to stage ", peer, ", which does not exist"));
    }
    if (!Remote(s, peer)) {
      RejectAt(p_, w, a, Str("talks to stage ", peer, ", which runs on the same rank (no comm needed)"));
    }
    if (comm_at_.count(a)) RejectAt(p_, w, a, "appears twice");
    comm_at_[a] = w;
    if (send && forward && !tracker_.Has(F(s, m))) {
      RejectAt(p_, w, a, Str("sends before its forward ", ToString(F(s, m))));
    }
    if (send && !forward && !tracker_.Has(B(s, m)) && !tracker_.Has(I(s, m))) {
      RejectAt(p_, w, a, Str("sends before its backward ", ToString(B(s, m)), " or ", ToString(I(s, m))));
    }
  }

  void CheckStageAction(Where w, const Action& a) {
    const int s = a.stage;
    if (a.kind == ActionKind::kUnshard) {
      if (unsharded_.count(s)) RejectAt(p_, w, a, Str("unshards stage ", s, " twice without a RESHARD between"));
      unsharded_.insert(s);
      ever_unsharded_.insert(s);
    } else if (a.kind == ActionKind::kReshard) {
      if (!unsharded_.count(s)) RejectAt(p_, w, a, Str("reshards stage ", s, ", which is not unsharded"));
      unsharded_.erase(s);
    } else {
      if (reduced_.count(s)) RejectAt(p_, w, a, Str("reduces stage ", s, "'s gradients twice"));
      const int done = tracker_.Count(s, ActionKind::kFullBackward) + tracker_.Count(s, ActionKind::kBackwardWeight);
      if (done != m_) {
        RejectAt(p_, w, a, Str("runs before the stage's last backward (", done, " of ", m_,
                               " weight gradients done)"));
      }
      reduced_.insert(s);
    }
  }

  const Program& p_;
  std::span<const int> rank_of_;
  int m_;
  ComputeTracker tracker_;
  std::vector<std::set<Action>> seen_;  // per rank
  std::map<Action, Where> comm_at_;
  std::set<int> unsharded_, ever_unsharded_, reduced_;
};

}  // namespace

std::vector<int> VerifyComputeProgram(const Program& program, int num_stages, int num_microbatches) {
  TESSEL_CHECK(!program.empty() && num_stages >= 1 && num_microbatches >= 1, "VerifyComputeProgram: needs ranks, ",
               "stages and microbatches, got ", program.size(), " ranks, ", num_stages, " stages, ", num_microbatches,
               " microbatches");
  std::vector<int> stage_to_rank(num_stages, -1);
  ComputeTracker tracker(num_stages);
  ForEachStepMajor(program, [&](Where w, const Action& a) {
    if (!IsCompute(a.kind)) {
      RejectAt(program, w, a, "is not a compute action (F, B, I or W); verify lowered programs with "
                              "VerifyLoweredProgram");
    }
    CheckIndices(program, w, a, num_stages, num_microbatches);
    int& owner = stage_to_rank[a.stage];
    if (owner >= 0 && owner != w.rank) {
      RejectAt(program, w, a, Str("puts stage ", a.stage, " on a second rank (it runs on rank ", owner,
                                  "); each stage lives on one rank"));
    }
    owner = w.rank;
    if (std::string why = tracker.Apply(a); !why.empty()) RejectAt(program, w, a, why);
  });
  for (int s = 0; s < num_stages; ++s) {
    TESSEL_CHECK(stage_to_rank[s] >= 0, "pipeline program: stage ", s, " has no actions (", num_stages,
                 " stages expected)\n", FormatProgram(program));
  }
  CheckCounts(tracker, stage_to_rank, num_microbatches);
  CheckNoWaitCycle(program, stage_to_rank, /*lowered=*/false);
  return stage_to_rank;
}


void VerifyLoweredProgram(const Program& program, std::span<const int> stage_to_rank, int num_microbatches) {
  TESSEL_CHECK(!program.empty() && !stage_to_rank.empty() && num_microbatches >= 1, "VerifyLoweredProgram: needs ",
               "ranks, stages and microbatches, got ", program.size(), " ranks, ", stage_to_rank.size(), " stages, ",
               num_microbatches, " microbatches");
  for (size_t s = 0; s < stage_to_rank.size(); ++s) {
    TESSEL_CHECK(stage_to_rank[s] >= 0 && stage_to_rank[s] < static_cast<int>(program.size()),
                 "VerifyLoweredProgram: stage_to_rank puts stage ", s, " on rank ", stage_to_rank[s], " but the ",
                 "program has ", program.size(), " ranks");
  }
  LoweredChecker checker(program, stage_to_rank, num_microbatches);
  ForEachStepMajor(program, [&](Where w, const Action& a) { checker.Check(w, a); });
  checker.Finish();
  CheckNoWaitCycle(program, stage_to_rank, /*lowered=*/true);
  CheckCommBatchesFinish(program, stage_to_rank);
}

}  // namespace tessel::pipelining
