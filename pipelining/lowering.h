// pipelining/lowering.h — lowering passes from a compute-only program (schedules.h) to the program the
// executor runs: FSDP unshard/reshard, gradient reduction, I+W merging and point-to-point send/recv.
// One pass per .cc file (unshard_reshard.cc, reduce_grad.cc, merge_backward.cc, send_recv.cc,
// lower_program.cc); they follow PyTorch's `_add_unshard_reshard`, `_add_reduce_grad`, `_merge_bw` and
// `_add_send_recv` in torch/distributed/pipelining/schedules.py.
//
// Invariant: a lowered program has no idle slots and, fed to VerifyLoweredProgram (verifier.h), runs to
// completion: every RECV_x on rank q is matched by the SEND_x of the neighbouring stage on its rank, placed
// so that no cycle of waits exists when sends are non-blocking (isend) and receives block when their data is
// needed. Passes never reorder compute actions on a rank; they only insert (and MergeBackward fuses).
//
// Example:
//   Program compute = GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 2);
//   Program lowered = LowerProgram(compute, StageToRankMap(ScheduleKind::k1F1B, 2, 2), 2, {});
//   // rank 0: 0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD
//   // rank 1: 1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "pipelining/action.h"

namespace tessel::pipelining {

// Inserts `sUNSHARD` before the stage's compute is near (prefetching the next `max_active_stages` distinct
// stages this rank will compute) and `sRESHARD` when a stage leaves that window; every stage is resharded at
// the end. Drops idle slots. [0F0,0F1,_,0B0,0B1] -> [0UNSHARD,0F0,0F1,0B0,0B1,0RESHARD].
// Only compute actions (F, B, I, W) move the window; other actions stay in place, so over a lowered program (the
// executor's, when fully_shard is applied after lowering) every UNSHARD / RESHARD lands right before a compute
// action or at the end, never inside a run of SEND/RECV. REQUIRES: max_active_stages >= 1.
RankProgram AddUnshardReshard(const RankProgram& compute, int max_active_stages = 3);

// Appends `sREDUCE_GRAD` right after the stage's `num_microbatches`-th B or W (its last gradient
// contribution), so the reduction of the accumulated gradient starts as early as possible. Drops idle slots.
RankProgram AddReduceGrad(const RankProgram& actions, int num_microbatches);

// Replaces `sI m` immediately followed (idle slots skipped) by `sW m` with the single full backward `sB m`:
// nothing runs between them, so splitting buys no overlap and costs the retained state. Drops idle slots.
RankProgram MergeBackward(const RankProgram& compute);

// Inserts SEND/RECV for every stage boundary that crosses ranks (index of `stage_to_rank` = stage):
// after sF m whose stage+1 lives elsewhere, `sSEND_F m` on this rank and `(s+1)RECV_F m` on the receiver;
// after sB m / sI m whose stage-1 lives elsewhere, `sSEND_B m` and `(s-1)RECV_B m`. Ranks are advanced in
// lock step, a receiver's RECV placed when the sender's compute is placed, and a compute action waits until
// its input was received — the order that makes the program deadlock-free. Idle slots of `compute` count as
// lock-step steps (as in PyTorch), so they shape where RECVs land; LowerProgram drops them first, as PyTorch's
// runtime does. Boundaries inside one rank (the
// bottom of a V) get no comm actions. Throws kInvalidArgument if the compute program cannot make progress
// (a malformed schedule), naming each blocked rank and its next action.
Program AddSendRecv(const Program& compute, std::span<const int> stage_to_rank);

// The runs of consecutive SEND/RECV actions on one rank, as [begin, end) slot indices: the executor posts each
// run as one batched isend/irecv, so a SEND_F to the next rank and the RECV_B from it that meet at a 1F1B
// step go out together (PyTorch's "fwd_send_bwd_recv" batch) and cannot deadlock on ordering.
std::vector<std::pair<int, int>> CommBatches(const RankProgram& lowered);

struct LowerOptions {
  bool fsdp = false;            // stages are under fully_shard: insert UNSHARD/RESHARD
  int max_active_stages = 3;    // unshard window for fsdp
  bool reduce_grad = true;      // insert REDUCE_GRAD after each stage's last backward
  bool merge_backward = false;  // fuse adjacent I/W into B before the other passes
};

// MergeBackward (optional) -> AddUnshardReshard (optional) -> AddReduceGrad (optional) -> AddSendRecv.
Program LowerProgram(const Program& compute, std::span<const int> stage_to_rank, int num_microbatches,
                     const LowerOptions& options);

}  // namespace tessel::pipelining
