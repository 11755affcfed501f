// pipelining/reduce_grad.cc — the gradient-reduction lowering pass: REDUCE_GRAD right after a stage's last
// gradient contribution (see AddReduceGrad in lowering.h; PyTorch's _add_reduce_grad).
#include <map>

#include "core/base/error.h"
#include "pipelining/lowering.h"

namespace tessel::pipelining {

RankProgram AddReduceGrad(const RankProgram& actions, int num_microbatches) {
  TESSEL_CHECK(num_microbatches >= 1, "AddReduceGrad: num_microbatches must be >= 1, got ", num_microbatches);
  std::map<int, int> contributions;  // stage -> B and W actions seen (each finishes one microbatch's weight grad)
  RankProgram out;
  for (const auto& a : actions) {
    if (!a.has_value()) continue;
    out.push_back(a);
    if (a->kind != ActionKind::kFullBackward && a->kind != ActionKind::kBackwardWeight) continue;
    if (++contributions[a->stage] == num_microbatches) {
      out.push_back(Action{a->stage, ActionKind::kReduceGrad, std::nullopt});
    }
  }
  return out;
}

}  // namespace tessel::pipelining
