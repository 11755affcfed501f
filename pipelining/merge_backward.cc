// pipelining/merge_backward.cc — fuses `sI m` directly followed by `sW m` into `sB m` (see MergeBackward in
// lowering.h; PyTorch's _merge_bw).
#include "pipelining/lowering.h"

namespace tessel::pipelining {

RankProgram MergeBackward(const RankProgram& compute) {
  const RankProgram actions = WithoutIdle(compute);
  RankProgram out;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = *actions[i];
    const bool fuse = a.kind == ActionKind::kBackwardInput && i + 1 < actions.size() &&
                      actions[i + 1]->kind == ActionKind::kBackwardWeight && actions[i + 1]->stage == a.stage &&
                      actions[i + 1]->microbatch == a.microbatch;
    if (fuse) {
      out.push_back(B(a.stage, *a.microbatch));
      ++i;
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace tessel::pipelining
