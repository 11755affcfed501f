// pipelining/unshard_reshard.cc — the FSDP lowering pass: UNSHARD a stage before its compute comes near,
// RESHARD it when it leaves the window (see AddUnshardReshard in lowering.h; PyTorch's _add_unshard_reshard).
#include <algorithm>
#include <optional>
#include <vector>

#include "core/base/error.h"
#include "pipelining/lowering.h"

namespace tessel::pipelining {
namespace {

bool IsComputeSlot(const std::optional<Action>& slot) { return slot.has_value() && IsCompute(slot->kind); }

// The first `count` distinct stages computed from slot `from` on, in order of first appearance.
std::vector<int> NextStages(const RankProgram& compute, size_t from, int count) {
  std::vector<int> stages;
  for (size_t i = from; i < compute.size() && static_cast<int>(stages.size()) < count; ++i) {
    if (!IsComputeSlot(compute[i])) continue;
    if (std::find(stages.begin(), stages.end(), compute[i]->stage) == stages.end()) stages.push_back(compute[i]->stage);
  }
  return stages;
}

}  // namespace

RankProgram AddUnshardReshard(const RankProgram& compute, int max_active_stages) {
  TESSEL_CHECK(max_active_stages >= 1, "AddUnshardReshard: max_active_stages must be >= 1, got ", max_active_stages);
  std::vector<int> active;  // kept sorted: evictions go in increasing stage order
  RankProgram out;
  for (size_t i = 0; i < compute.size(); ++i) {
    if (!compute[i].has_value()) continue;
    if (!IsCompute(compute[i]->kind)) {  // a lowered program's comm and REDUCE_GRAD: in place, outside the window
      out.push_back(compute[i]);
      continue;
    }
    const std::vector<int> next = NextStages(compute, i, max_active_stages);
    for (auto it = active.begin(); it != active.end();) {
      if (std::find(next.begin(), next.end(), *it) == next.end()) {
        out.push_back(Action{*it, ActionKind::kReshard, std::nullopt});
        it = active.erase(it);
      } else {
        ++it;
      }
    }
    for (int stage : next) {
      if (std::find(active.begin(), active.end(), stage) != active.end()) continue;
      out.push_back(Action{stage, ActionKind::kUnshard, std::nullopt});
      active.insert(std::upper_bound(active.begin(), active.end(), stage), stage);
    }
    out.push_back(compute[i]);
  }
  for (int stage : active) out.push_back(Action{stage, ActionKind::kReshard, std::nullopt});
  return out;
}

}  // namespace tessel::pipelining
