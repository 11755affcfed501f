// pipelining/lower_program.cc — the lowering pipeline (see LowerProgram in lowering.h).
#include "core/base/error.h"
#include "pipelining/lowering.h"

namespace tessel::pipelining {

Program LowerProgram(const Program& compute, std::span<const int> stage_to_rank, int num_microbatches,
                     const LowerOptions& options) {
  Program per_rank;
  for (size_t r = 0; r < compute.size(); ++r) {
    for (const auto& a : compute[r]) {
      TESSEL_CHECK(!a.has_value() || IsCompute(a->kind), "LowerProgram: expected a compute-only program, found ",
                   ToString(*a), " on rank ", r, " (SEND/RECV, UNSHARD/RESHARD and REDUCE_GRAD are inserted here)");
    }
    RankProgram actions = options.merge_backward ? MergeBackward(compute[r]) : WithoutIdle(compute[r]);
    if (options.fsdp) actions = AddUnshardReshard(actions, options.max_active_stages);
    if (options.reduce_grad) actions = AddReduceGrad(actions, num_microbatches);
    per_rank.push_back(std::move(actions));
  }
  return AddSendRecv(per_rank, stage_to_rank);
}

}  // namespace tessel::pipelining
