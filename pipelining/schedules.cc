// pipelining/schedules.cc — the schedule generators (see schedules.h). Each generator emits the order of
// compute actions per rank; PadWithIdle then inserts the idle slots a unit-cost lock-step run would show, so
// the compute-only grid reads like PyTorch's (idle slots carry no meaning past that: lowering drops them).
#include "pipelining/schedules.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "pipelining/dependencies.h"

namespace tessel::pipelining {
namespace {

struct Shape {
  ScheduleKind kind;
  int p;  // ranks
  int v;  // stages per rank
  int m;  // microbatches
  int num_stages() const { return p * v; }
};

// Per-stage microbatch counters: Next(stage) returns the stage's next index and advances it.
class Counter {
 public:
  int Next(int stage) { return next_[stage]++; }
  int Peek(int stage) const {
    auto it = next_.find(stage);
    return it == next_.end() ? 0 : it->second;
  }

 private:
  std::map<int, int> next_;
};

RankProgram GPipeOrder(const Shape& s, int r) {
  RankProgram out;
  for (int mb = 0; mb < s.m; ++mb) out.push_back(F(r, mb));
  for (int mb = 0; mb < s.m; ++mb) out.push_back(B(r, mb));
  return out;
}

// 1F1B (PipeDream-Flush): p-1-r warm-up forwards, then alternate F and B, then drain the backwards.
RankProgram OneFOneBOrder(const Shape& s, int r) {
  RankProgram out;
  const int warmup = std::min(s.p - 1 - r, s.m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(F(r, f));
  for (; f < s.m; ++f, ++b) {
    out.push_back(F(r, f));
    out.push_back(B(r, b));
  }
  for (; b < s.m; ++b) out.push_back(B(r, b));
  return out;
}

// Looped BFS (Lamy-Poirier 2022): all forwards of each local stage in stage order, then all backwards of
// each local stage in reverse stage order, microbatches reversed.
RankProgram LoopedBfsOrder(const Shape& s, int r) {
  RankProgram out;
  for (int k = 0; k < s.v; ++k) {
    for (int mb = 0; mb < s.m; ++mb) out.push_back(F(k * s.p + r, mb));
  }
  for (int k = s.v - 1; k >= 0; --k) {
    for (int mb = s.m - 1; mb >= 0; --mb) out.push_back(B(k * s.p + r, mb));
  }
  return out;
}

// Interleaved 1F1B (Narayanan et al. 2021) and, with `zero_bubble`, interleaved ZB-H1 (Qi et al. 2023):
// microbatches go through the local stages in rounds of `per_round`; a warm-up of forwards, a steady phase
// of one forward and one backward, a cool-down of backwards. Zero bubble splits each backward into I and
// delays its W by r steady-state steps, then W fills the slots 1F1B would leave idle.
RankProgram InterleavedOrder(const Shape& s, int r, bool zero_bubble) {
  const int rounds = std::max(1, s.m / s.p);
  const int per_round = s.m / rounds;
  const int factor = zero_bubble ? 1 : 2;
  const int total_f = s.m * s.v;
  const int warmup = std::min((s.v - 1) * per_round + factor * (s.p - 1 - r), total_f);
  auto fwd_stage = [&](int op) { return ((op / per_round) % s.v) * s.p + r; };
  auto bwd_stage = [&](int op) { return (s.v - 1 - ((op - warmup) / per_round) % s.v) * s.p + r; };
  const ActionKind backward = zero_bubble ? ActionKind::kBackwardInput : ActionKind::kFullBackward;
  Counter fc, bc, wc;
  std::vector<int> backward_ops;
  size_t weights_done = 0;
  RankProgram out;
  auto push_weight = [&] {
    const int st = bwd_stage(backward_ops[weights_done++]);
    out.push_back(W(st, wc.Next(st)));
  };
  for (int op = 0; op < warmup + total_f; ++op) {
    if (op < total_f) {
      const int st = fwd_stage(op);
      out.push_back(F(st, fc.Next(st)));
    }
    if (op < warmup) continue;
    const int st = bwd_stage(op);
    out.push_back(Action{st, backward, bc.Next(st)});
    backward_ops.push_back(op);
    if (zero_bubble && op - warmup >= r) push_weight();
  }
  while (zero_bubble && weights_done < backward_ops.size()) push_weight();
  return out;
}

// ZB-V (Qi et al. 2023, §6; PyTorch's ScheduleZBVZeroBubble): rank r holds chunk 0 = stage r and chunk 1 =
// stage 2p-1-r. Phases: forwards of chunk 0; alternating chunk-1/chunk-0 forwards; chunk-1 F I W; a steady
// F0 I0 W0 F1 I1 W1; a cool-down of I's with W's filling the tail. Uses max(2p-1, m) microbatches so the
// pipeline is full, then drops the indices >= m.
RankProgram ZbvOrder(const Shape& s, int r) {
  const int p = s.p, n = std::max(2 * p - 1, s.m);
  const int c0 = r, c1 = 2 * p - 1 - r;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  RankProgram out;
  for (int k = 0; k < 2 * (p - r) - 1; ++k) out.push_back(F(c0, f0++));
  for (int k = 0; k < r; ++k) {
    out.push_back(F(c1, f1++));
    out.push_back(F(c0, f0++));
  }
  for (int k = 0; k < p - r; ++k) {
    out.push_back(F(c1, f1++));
    out.push_back(I(c1, b1));
    out.push_back(W(c1, b1++));
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) out.push_back(F(c0, f0++));
    out.push_back(I(c0, b0));
    out.push_back(W(c0, b0++));
    out.push_back(F(c1, f1++));
    out.push_back(I(c1, b1));
    out.push_back(W(c1, b1++));
  }
  int w0 = b0, w1 = b1;
  for (int k = 0; k < r; ++k) {
    out.push_back(I(c0, b0++));
    out.push_back(I(c1, b1++));
  }
  for (int k = 0; k < p - r; ++k) {
    out.push_back(I(c0, b0++));
    out.push_back(W(c0, w0++));
  }
  while (w1 < b1) out.push_back(W(c1, w1++));
  while (w0 < b0) out.push_back(W(c0, w0++));
  TESSEL_INTERNAL_ASSERT(w0 == f0 && b0 == f0 && w1 == f1 && b1 == f1, "ZBV counts: F0 ", f0, " I0 ", b0, " W0 ", w0,
                         " F1 ", f1, " I1 ", b1, " W1 ", w1);
  RankProgram kept;
  for (const auto& a : out) {
    if (*a->microbatch < s.m) kept.push_back(a);
  }
  return kept;
}

// DualPipeV (DeepSeek-V3, arXiv 2412.19437; PyTorch's ScheduleDualPipeV) on the V placement. PyTorch pairs a
// forward of one chunk with a full backward of the other in an overlapped action (OVERLAP_F_B); tessel's IR
// has no such action, so each pair is emitted as the forward followed by the backward, which keeps the
// dependencies and the order and leaves the overlap to the executor.
class DualPipeVBuilder {
 public:
  explicit DualPipeVBuilder(RankProgram* out) : out_(out) {}
  void Add(int stage, ActionKind kind) {
    const ActionKind counter_kind = kind == ActionKind::kFullBackward ? ActionKind::kBackwardInput : kind;
    const int mb = next_[{stage, counter_kind}];
    out_->push_back(Action{stage, kind, mb});
    if (kind == ActionKind::kFullBackward) {
      ++next_[{stage, ActionKind::kBackwardInput}];
      ++next_[{stage, ActionKind::kBackwardWeight}];
      return;
    }
    if (kind == ActionKind::kBackwardInput) pending_weights_.push_back({stage, mb});
    ++next_[{stage, kind}];
  }
  void AddPair(int forward_stage, int backward_stage) {
    Add(forward_stage, ActionKind::kForward);
    Add(backward_stage, ActionKind::kFullBackward);
  }
  void AddPendingWeight() {
    if (pending_weights_.empty()) return;
    const auto [stage, mb] = pending_weights_.front();
    pending_weights_.erase(pending_weights_.begin());
    out_->push_back(W(stage, mb));
    ++next_[{stage, ActionKind::kBackwardWeight}];
  }

 private:
  RankProgram* out_;
  std::map<std::pair<int, ActionKind>, int> next_;
  std::vector<std::pair<int, int>> pending_weights_;
};

RankProgram DualPipeVOrder(const Shape& s, int r) {
  const int p = s.p, c0 = r, c1 = 2 * p - 1 - r;
  RankProgram out;
  DualPipeVBuilder b(&out);
  for (int k = 0; k < 2 * (p - r - 1); ++k) b.Add(c0, ActionKind::kForward);
  for (int k = 0; k < r + 1; ++k) {
    b.Add(c0, ActionKind::kForward);
    b.Add(c1, ActionKind::kForward);
  }
  for (int k = 0; k < p - r - 1; ++k) {
    b.Add(c1, ActionKind::kBackwardInput);
    b.AddPendingWeight();
    b.Add(c1, ActionKind::kForward);
  }
  for (int k = 0; k < s.m - 2 * p + r + 1; ++k) {
    if (k == 0 && r == p - 1) {  // not overlapped, to shrink the bubble (as DualPipe does)
      b.Add(c0, ActionKind::kForward);
      b.Add(c1, ActionKind::kFullBackward);
    } else {
      b.AddPair(c0, c1);
    }
    b.AddPair(c1, c0);
  }
  for (int k = 0; k < p - r - 1; ++k) {
    b.Add(c1, ActionKind::kFullBackward);
    b.AddPair(c1, c0);
  }
  bool split = false;
  const int tail = r + 1;
  for (int k = 0; k < tail; ++k) {
    if (k == tail / 2 && r % 2 == 1) split = true;
    b.Add(c1, split ? ActionKind::kBackwardInput : ActionKind::kFullBackward);
    if (k == tail / 2 && r % 2 == 0) split = true;
    b.Add(c0, split ? ActionKind::kBackwardInput : ActionKind::kFullBackward);
  }
  for (int k = 0; k < p - r - 1; ++k) {
    b.AddPendingWeight();
    b.Add(c0, split ? ActionKind::kBackwardInput : ActionKind::kFullBackward);
  }
  for (int k = 0; k < r + 1; ++k) b.AddPendingWeight();
  return out;
}

// Inserts idle slots so that, one action per step, no action runs before the step after its inputs were
// produced (dependencies.h). Throws kInternal if the orders cannot progress (a generator bug).
Program PadWithIdle(const Program& orders, const Shape& s) {
  std::set<Action> done;
  std::vector<size_t> next(orders.size(), 0);
  Program out(orders.size());
  auto remaining = [&] {
    for (size_t r = 0; r < orders.size(); ++r) {
      if (next[r] < orders[r].size()) return true;
    }
    return false;
  };
  while (remaining()) {
    std::vector<Action> finished;
    for (size_t r = 0; r < orders.size(); ++r) {
      if (next[r] >= orders[r].size()) continue;
      const Action& a = *orders[r][next[r]];
      bool ready = true;
      for (const auto& alternatives : DataDependencies(a, s.num_stages())) {
        ready = ready && std::any_of(alternatives.begin(), alternatives.end(),
                                     [&](const Action& d) { return done.count(d) > 0; });
      }
      if (ready) {
        out[r].push_back(a);
        finished.push_back(a);
        ++next[r];
      } else {
        out[r].push_back(std::nullopt);
      }
    }
    TESSEL_INTERNAL_ASSERT(!finished.empty(), ScheduleName(s.kind), " made no progress; program so far:\n",
                           FormatProgram(out));
    done.insert(finished.begin(), finished.end());
  }
  for (RankProgram& r : out) {
    while (!r.empty() && !r.back().has_value()) r.pop_back();
  }
  return out;
}

int CheckShape(ScheduleKind kind, int num_ranks, int num_stages, int num_microbatches) {
  const std::string_view name = ScheduleName(kind);
  TESSEL_CHECK(num_ranks >= 1 && num_stages >= 1 && num_microbatches >= 1, name,
               ": needs at least one rank, stage and microbatch, got ", num_ranks, " ranks, ", num_stages,
               " stages, ", num_microbatches, " microbatches");
  TESSEL_CHECK(num_stages % num_ranks == 0, name, " requires the number of stages (", num_stages,
               ") to be a multiple of the number of ranks (", num_ranks, ")");
  const int v = num_stages / num_ranks;
  const std::string where = Str(num_stages, " stages on ", num_ranks, " ranks");
  if (kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B) {
    TESSEL_CHECK(v == 1, name, " requires exactly 1 stage per rank, got ", v, " (", where, ")");
  }
  if (kind == ScheduleKind::kZBVZeroBubble || kind == ScheduleKind::kDualPipeV) {
    TESSEL_CHECK(v == 2, name, " requires exactly 2 stages per rank, got ", v, " (", where, ")");
  }
  if (kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kInterleavedZeroBubble) {
    const int rounds = std::max(1, num_microbatches / num_ranks);
    TESSEL_CHECK(num_microbatches % rounds == 0, name,
                 " requires the number of microbatches to be a multiple of the number of rounds ", rounds,
                 " (= max(1, microbatches / ranks)), got ", num_microbatches, " microbatches on ", num_ranks,
                 " ranks");
  }
  if (kind == ScheduleKind::kDualPipeV) {
    TESSEL_CHECK(num_microbatches >= num_stages, name, " requires at least as many microbatches as stages, got ",
                 num_microbatches, " microbatches for ", num_stages, " stages");
  }
  return v;
}

}  // namespace

std::string_view ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "GPipe";
    case ScheduleKind::k1F1B: return "1F1B";
    case ScheduleKind::kInterleaved1F1B: return "Interleaved1F1B";
    case ScheduleKind::kLoopedBFS: return "LoopedBFS";
    case ScheduleKind::kInterleavedZeroBubble: return "InterleavedZeroBubble";
    case ScheduleKind::kZBVZeroBubble: return "ZBVZeroBubble";
    case ScheduleKind::kDualPipeV: return "DualPipeV";
  }
  TESSEL_INTERNAL_ASSERT(false, "ScheduleName: unknown kind ", static_cast<int>(kind));
}

std::vector<ScheduleKind> AllScheduleKinds() {
  return {ScheduleKind::kGPipe,          ScheduleKind::k1F1B,
          ScheduleKind::kInterleaved1F1B, ScheduleKind::kLoopedBFS,
          ScheduleKind::kInterleavedZeroBubble, ScheduleKind::kZBVZeroBubble,
          ScheduleKind::kDualPipeV};
}

ScheduleKind ParseScheduleKind(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  std::string valid;
  for (ScheduleKind k : AllScheduleKinds()) {
    if (lower(ScheduleName(k)) == lower(name)) return k;
    valid += Str(valid.empty() ? "" : ", ", ScheduleName(k));
  }
  TESSEL_FAIL(ErrorCode::kInvalidArgument, "unknown pipeline schedule '", name, "'; valid: ", valid);
}

StagePlacement PlacementOf(ScheduleKind kind) {
  return (kind == ScheduleKind::kZBVZeroBubble || kind == ScheduleKind::kDualPipeV) ? StagePlacement::kV
                                                                                    : StagePlacement::kLooped;
}

bool UsesSplitBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleavedZeroBubble || kind == ScheduleKind::kZBVZeroBubble ||
         kind == ScheduleKind::kDualPipeV;
}

int StageToRank(StagePlacement placement, int stage, int num_ranks, int num_stages) {
  TESSEL_CHECK(num_ranks >= 1 && num_stages % num_ranks == 0, "StageToRank: ", num_stages,
               " stages do not divide over ", num_ranks, " ranks");
  TESSEL_CHECK(placement != StagePlacement::kV || num_stages == 2 * num_ranks,
               "StageToRank: V placement needs 2 stages per rank, got ", num_stages, " stages on ", num_ranks,
               " ranks");
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, stage >= 0 && stage < num_stages, "StageToRank: stage ", stage,
                    " out of range [0, ", num_stages, ")");
  if (placement == StagePlacement::kLooped) return stage % num_ranks;
  return stage < num_ranks ? stage : 2 * num_ranks - 1 - stage;
}

std::vector<int> StageToRankMap(StagePlacement placement, int num_ranks, int num_stages) {
  std::vector<int> out;
  for (int s = 0; s < num_stages; ++s) out.push_back(StageToRank(placement, s, num_ranks, num_stages));
  return out;
}

std::vector<int> StageToRankMap(ScheduleKind kind, int num_ranks, int num_stages) {
  return StageToRankMap(PlacementOf(kind), num_ranks, num_stages);
}

std::vector<int> StagesOfRank(StagePlacement placement, int rank, int num_ranks, int num_stages) {
  std::vector<int> out;
  for (int s = 0; s < num_stages; ++s) {
    if (StageToRank(placement, s, num_ranks, num_stages) == rank) out.push_back(s);
  }
  return out;
}

Program GenerateSchedule(ScheduleKind kind, int num_ranks, int num_stages, int num_microbatches) {
  const Shape s{kind, num_ranks, CheckShape(kind, num_ranks, num_stages, num_microbatches), num_microbatches};
  Program orders;
  for (int r = 0; r < num_ranks; ++r) {
    switch (kind) {
      case ScheduleKind::kGPipe: orders.push_back(GPipeOrder(s, r)); break;
      case ScheduleKind::k1F1B: orders.push_back(OneFOneBOrder(s, r)); break;
      case ScheduleKind::kInterleaved1F1B: orders.push_back(InterleavedOrder(s, r, false)); break;
      case ScheduleKind::kLoopedBFS: orders.push_back(LoopedBfsOrder(s, r)); break;
      case ScheduleKind::kInterleavedZeroBubble: orders.push_back(InterleavedOrder(s, r, true)); break;
      case ScheduleKind::kZBVZeroBubble: orders.push_back(ZbvOrder(s, r)); break;
      case ScheduleKind::kDualPipeV: orders.push_back(DualPipeVOrder(s, r)); break;
    }
  }
  return PadWithIdle(orders, s);
}

}  // namespace tessel::pipelining
