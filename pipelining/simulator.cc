// pipelining/simulator.cc — the cost simulation and PyTorch's lock-step simulation (see simulator.h).
#include "pipelining/simulator.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "core/base/error.h"
#include "pipelining/dependencies.h"

namespace tessel::pipelining {
namespace {

struct Placed {
  int rank;
  double end;
};

class EventSimulation {
 public:
  EventSimulation(const Program& program, std::span<const int> stage_to_rank, const ActionCosts& costs)
      : rank_of_(stage_to_rank), costs_(costs), free_at_(program.size(), 0.0) {
    for (const RankProgram& r : program) actions_.push_back(WithoutIdle(r));
  }

  SimulationResult Run() {
    std::vector<size_t> next(actions_.size(), 0);
    SimulationResult result;
    std::vector<std::vector<TimedAction>> per_rank(actions_.size());
    while (true) {
      bool remaining = false, progress = false;
      for (size_t r = 0; r < actions_.size(); ++r) {
        while (next[r] < actions_[r].size()) {
          const Action& a = *actions_[r][next[r]];
          const std::optional<double> ready = ReadyTime(a, static_cast<int>(r));
          if (!ready.has_value()) break;
          const double start = std::max(*ready, free_at_[r]);
          const double end = start + costs_.Of(a.kind);
          free_at_[r] = end;
          placed_[a] = {static_cast<int>(r), end};
          per_rank[r].push_back({static_cast<int>(r), a, start, end});
          ++next[r];
          progress = true;
        }
        remaining = remaining || next[r] < actions_[r].size();
      }
      if (!remaining) break;
      if (!progress) Stuck(next);
    }
    for (auto& r : per_rank) result.timeline.insert(result.timeline.end(), r.begin(), r.end());
    Summarize(&result);
    return result;
  }

 private:
  int RankOf(int stage) const {
    TESSEL_CHECK(stage >= 0 && stage < static_cast<int>(rank_of_.size()), "Simulate: action on stage ", stage,
                 " but stage_to_rank has ", rank_of_.size(), " stages");
    return rank_of_[stage];
  }

  // When `a`'s inputs are available on `rank`, or std::nullopt while some producer has not been placed.
  std::optional<double> ReadyTime(const Action& a, int rank) const {
    RankOf(a.stage);  // range check
    double ready = 0;
    auto arrival = [&](const Action& producer) -> std::optional<double> {
      auto it = placed_.find(producer);
      if (it == placed_.end()) return std::nullopt;
      return it->second.end + (it->second.rank != rank ? costs_.transfer : 0.0);
    };
    for (const auto& alternatives : DataDependencies(a, static_cast<int>(rank_of_.size()))) {
      std::optional<double> best;
      for (const Action& producer : alternatives) {
        const std::optional<double> t = arrival(producer);
        if (t.has_value()) best = best.has_value() ? std::min(*best, *t) : *t;
      }
      if (!best.has_value()) return std::nullopt;
      ready = std::max(ready, *best);
    }
    return ready;
  }

  [[noreturn]] void Stuck(const std::vector<size_t>& next) const {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "Simulate: the program cannot finish:",
                DescribeNextActions(actions_, next, "action", " waits for an input that is never produced"));
  }

  void Summarize(SimulationResult* result) const {
    const size_t num_ranks = actions_.size();
    result->busy.assign(num_ranks, 0.0);
    for (const TimedAction& t : result->timeline) {
      result->makespan = std::max(result->makespan, t.end);
      result->busy[t.rank] += t.end - t.start;
    }
    for (size_t r = 0; r < num_ranks; ++r) {
      result->idle_fraction.push_back(result->makespan > 0 ? 1.0 - result->busy[r] / result->makespan : 0.0);
      result->bubble += result->idle_fraction.back() / static_cast<double>(num_ranks);
    }
    result->peak_in_flight = PeakInFlight(result->timeline, static_cast<int>(rank_of_.size()));
  }

  // Activations of (stage, microbatch) are held from the end of F to the end of B, or of W when split.
  static std::vector<int> PeakInFlight(const std::vector<TimedAction>& timeline, int num_stages) {
    std::vector<std::vector<std::pair<double, int>>> events(num_stages);  // (time, +1 / -1)
    for (const TimedAction& t : timeline) {
      const ActionKind k = t.action.kind;
      if (k == ActionKind::kForward) events[t.action.stage].push_back({t.end, +1});
      if (k == ActionKind::kFullBackward || k == ActionKind::kBackwardWeight) events[t.action.stage].push_back({t.end, -1});
    }
    std::vector<int> peak(num_stages, 0);
    for (int s = 0; s < num_stages; ++s) {
      std::sort(events[s].begin(), events[s].end());  // at equal times, releases (-1) first
      int live = 0;
      for (const auto& [time, delta] : events[s]) peak[s] = std::max(peak[s], live += delta);
    }
    return peak;
  }

  std::span<const int> rank_of_;
  const ActionCosts& costs_;
  Program actions_;
  std::vector<double> free_at_;
  std::map<Action, Placed> placed_;
};

// PyTorch's `_simulate_comms_compute` readiness: what the rank of `a`'s stage has done so far.
class Lockstep {
 public:
  Lockstep(std::span<const int> stage_to_rank, size_t num_ranks) : rank_of_(stage_to_rank), done_(num_ranks) {}

  bool Ready(const Action& a) const {
    const int s = a.stage, last = static_cast<int>(rank_of_.size()) - 1;
    const std::optional<int> m = a.microbatch;
    auto did = [&](int stage, ActionKind kind) { return Done(rank_of_[stage], Action{stage, kind, m}); };
    switch (a.kind) {
      case ActionKind::kForward:
        return s == 0 || did(s, ActionKind::kRecvF) || did(s - 1, ActionKind::kForward);
      case ActionKind::kFullBackward:
      case ActionKind::kBackwardInput:
        return s == last || did(s, ActionKind::kRecvB) || did(s + 1, ActionKind::kBackwardInput) ||
               did(s + 1, ActionKind::kFullBackward);
      case ActionKind::kSendF: return did(s, ActionKind::kForward);
      case ActionKind::kRecvF: return s > 0 && did(s - 1, ActionKind::kSendF);
      case ActionKind::kSendB: return did(s, ActionKind::kBackwardInput) || did(s, ActionKind::kFullBackward);
      case ActionKind::kRecvB: return s < last && did(s + 1, ActionKind::kSendB);
      default: return true;  // W, UNSHARD, RESHARD, REDUCE_GRAD
    }
  }
  void MarkDone(size_t rank, const Action& a) { done_[rank].insert(a); }

 private:
  bool Done(int rank, const Action& a) const { return done_[rank].count(a) > 0; }
  std::span<const int> rank_of_;
  std::vector<std::set<Action>> done_;
};

}  // namespace

double ActionCosts::Of(ActionKind kind) const {
  switch (kind) {
    case ActionKind::kForward: return forward;
    case ActionKind::kFullBackward: return full_backward();
    case ActionKind::kBackwardInput: return backward_input;
    case ActionKind::kBackwardWeight: return backward_weight;
    case ActionKind::kUnshard: return unshard;
    case ActionKind::kReshard: return reshard;
    case ActionKind::kReduceGrad: return reduce_grad;
    default: return 0;  // SEND/RECV: the transfer is an edge latency, not rank time
  }
}

SimulationResult Simulate(const Program& program, std::span<const int> stage_to_rank, const ActionCosts& costs) {
  return EventSimulation(program, stage_to_rank, costs).Run();
}

Program SimulateLockstep(const Program& lowered, std::span<const int> stage_to_rank) {
  std::vector<RankProgram> pending;
  for (const RankProgram& r : lowered) pending.push_back(WithoutIdle(r));
  for (const RankProgram& r : pending) {
    for (const auto& a : r) {
      TESSEL_CHECK(a->stage >= 0 && a->stage < static_cast<int>(stage_to_rank.size()), "SimulateLockstep: action ",
                   ToString(*a), " names a stage outside the ", stage_to_rank.size(), "-stage pipeline");
    }
  }
  std::vector<size_t> next(pending.size(), 0);
  Program grid(pending.size());
  Lockstep state(stage_to_rank, pending.size());
  auto left = [&](size_t r) { return next[r] < pending[r].size(); };
  auto any_left = [&] {
    for (size_t r = 0; r < pending.size(); ++r) {
      if (left(r)) return true;
    }
    return false;
  };
  while (any_left()) {
    bool progress = false;
    for (size_t r = 0; r < pending.size(); ++r) {
      if (!left(r)) continue;
      const Action& a = *pending[r][next[r]];
      if (state.Ready(a)) {
        grid[r].push_back(a);
        state.MarkDone(r, a);
        ++next[r];
        progress = true;
      } else {
        grid[r].push_back(std::nullopt);
      }
    }
    // A second pass lets a rank that idled take an action a later rank unblocked in this same step.
    for (size_t r = 0; r < pending.size(); ++r) {
      if (!left(r) || grid[r].empty() || grid[r].back().has_value()) continue;
      const Action& a = *pending[r][next[r]];
      if (!state.Ready(a)) continue;
      grid[r].back() = a;
      state.MarkDone(r, a);
      ++next[r];
    }
    if (!progress) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "SimulateLockstep: no rank can progress (a cycle of waits):",
                  DescribeNextActions(pending, next, "action", ""),
                  "\n", FormatProgram(grid));
    }
  }
  return grid;
}

double BubbleFraction1F1B(int num_ranks, int num_microbatches) {
  return static_cast<double>(num_ranks - 1) / (num_microbatches + num_ranks - 1);
}

double BubbleFractionInterleaved(int num_ranks, int stages_per_rank, int num_microbatches) {
  return static_cast<double>(num_ranks - 1) / (stages_per_rank * num_microbatches + num_ranks - 1);
}

double BubbleFractionZeroBubbleH1(int num_ranks, int num_microbatches, const ActionCosts& c) {
  const double bubble = (num_ranks - 1) * (c.forward + c.backward_input - c.backward_weight);
  const double work = num_microbatches * (c.forward + c.backward_input + c.backward_weight);
  return bubble / (bubble + work);
}

}  // namespace tessel::pipelining
