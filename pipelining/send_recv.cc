// pipelining/send_recv.cc — the point-to-point lowering pass and the batching rule (see AddSendRecv and
// CommBatches in lowering.h; PyTorch's _add_send_recv).
//
// Why this order cannot deadlock: ranks advance in lock step over their compute programs; a RECV is placed
// on the receiver at the moment the sender places the producing compute (so each rank's RECVs appear in the
// order the data is produced), and a compute action is placed only after its own RECV is already in its
// rank's program. With non-blocking sends, every RECV then waits only on a SEND placed strictly earlier in the
// global lock-step order, so no cycle of waits can form.
#include <set>

#include "core/base/error.h"
#include "pipelining/lowering.h"

namespace tessel::pipelining {
namespace {

class SendRecvLowering {
 public:
  SendRecvLowering(const Program& compute, std::span<const int> stage_to_rank)
      : compute_(compute), rank_of_(stage_to_rank), out_(compute.size()), placed_(compute.size()) {}

  Program Run() {
    std::vector<size_t> next(compute_.size(), 0);
    while (true) {
      bool remaining = false, progress = false;
      for (size_t r = 0; r < compute_.size(); ++r) {
        if (next[r] >= compute_[r].size()) continue;
        remaining = true;
        const std::optional<Action>& a = compute_[r][next[r]];
        if (a.has_value() && !Ready(*a, r)) continue;
        if (a.has_value()) Place(*a, r);
        ++next[r];
        progress = true;
      }
      if (!remaining) return out_;
      if (!progress) Stuck(next);
    }
  }

 private:
  int last_stage() const { return static_cast<int>(rank_of_.size()) - 1; }
  int RankOf(int stage) const {
    TESSEL_CHECK(stage >= 0 && stage <= last_stage(), "AddSendRecv: action on stage ", stage, " but stage_to_rank has ",
                 rank_of_.size(), " stages");
    return rank_of_[stage];
  }
  bool Has(size_t r, const Action& a) const { return placed_[r].count(a) > 0; }

  // Compute actions wait for their input to be received (or produced on this rank, at the bottom of a V).
  bool Ready(const Action& a, size_t r) const {
    const int s = a.stage, m = a.microbatch.value_or(-1);
    if (a.kind == ActionKind::kForward && s != 0) {
      return Has(r, Action{s, ActionKind::kRecvF, m}) || Has(r, F(s - 1, m));
    }
    if ((a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput) && s != last_stage()) {
      return Has(r, Action{s, ActionKind::kRecvB, m}) || Has(r, I(s + 1, m)) || Has(r, B(s + 1, m));
    }
    return true;
  }

  void Append(size_t r, const Action& a) {
    out_[r].push_back(a);
    placed_[r].insert(a);
  }

  void Place(const Action& a, size_t r) {
    Append(r, a);
    const int s = a.stage;
    const std::optional<int> m = a.microbatch;
    if (a.kind == ActionKind::kForward && s != last_stage() && RankOf(s + 1) != RankOf(s)) {
      Append(r, Action{s, ActionKind::kSendF, m});
      Append(RankOf(s + 1), Action{s + 1, ActionKind::kRecvF, m});
    }
    const bool backward = a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput;
    if (backward && s != 0 && RankOf(s - 1) != RankOf(s)) {
      Append(r, Action{s, ActionKind::kSendB, m});
      Append(RankOf(s - 1), Action{s - 1, ActionKind::kRecvB, m});
    }
  }

  [[noreturn]] void Stuck(const std::vector<size_t>& next) const {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "AddSendRecv: malformed compute program, no rank can progress:",
                DescribeNextActions(compute_, next, "step", " waits for input that no rank produces before it"), "\n",
                FormatProgram(compute_));
  }

  const Program& compute_;
  std::span<const int> rank_of_;
  Program out_;
  std::vector<std::set<Action>> placed_;
};

}  // namespace

Program AddSendRecv(const Program& compute, std::span<const int> stage_to_rank) {
  return SendRecvLowering(compute, stage_to_rank).Run();
}

std::vector<std::pair<int, int>> CommBatches(const RankProgram& lowered) {
  std::vector<std::pair<int, int>> runs;
  const int n = static_cast<int>(lowered.size());
  for (int i = 0; i < n;) {
    if (!lowered[i].has_value() || !IsComm(lowered[i]->kind)) {
      ++i;
      continue;
    }
    int j = i;
    while (j < n && lowered[j].has_value() && IsComm(lowered[j]->kind)) ++j;
    runs.push_back({i, j});
    i = j;
  }
  return runs;
}

}  // namespace tessel::pipelining
