// pipelining/schedules.h — the schedule generators: for a schedule kind, pipeline ranks `p`, stages and
// microbatches `m`, the compute-only program (F / B / I / W actions and idle slots) each rank runs.
//
// Semantics follow PyTorch's torch/distributed/pipelining/schedules.py (names, stage placement, the order
// of actions each schedule produces); the code is tessel's own.
//
//   kind                    stages per rank   placement   microbatches
//   GPipe, 1F1B             1                 looped      any m >= 1
//   Interleaved1F1B         v >= 1            looped      m % max(1, m / p) == 0   (PyTorch's flexible rounds)
//   LoopedBFS               v >= 1            looped      any m >= 1
//   InterleavedZeroBubble   v >= 1            looped      m % max(1, m / p) == 0   (ZB-H1 when v == 1)
//   ZBVZeroBubble           exactly 2         V           any m >= 1
//   DualPipeV               exactly 2         V           m >= 2p
//
// Placement (StageToRank): looped puts stage s on rank s % p (rank r holds r, r+p, r+2p, ...); V puts
// stage s on rank s for s < p and on rank 2p-1-s after (rank r holds r and 2p-1-r), so the first and last
// stage share rank 0 and the hand-off at the bottom of the V stays on one rank.
//
// Invariant: every generated program passes VerifyComputeProgram (verifier.h): each stage lives on one
// rank, each microbatch is forwarded once per stage and backwarded once (B, or I then W).
//
// Example:
//   Program prog = GenerateSchedule(ScheduleKind::k1F1B, /*num_ranks=*/4, /*num_stages=*/4, /*m=*/8);
//   ToString(WithoutIdle(prog[3])) == "3F0,3B0,3F1,3B1,...";
//   std::vector<int> where = StageToRankMap(ScheduleKind::kZBVZeroBubble, 2, 4);   // {0, 1, 1, 0}
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipelining/action.h"

namespace tessel::pipelining {

enum class ScheduleKind {
  kGPipe,
  k1F1B,
  kInterleaved1F1B,
  kLoopedBFS,
  kInterleavedZeroBubble,
  kZBVZeroBubble,
  kDualPipeV,
};

enum class StagePlacement { kLooped, kV };

// "GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV".
std::string_view ScheduleName(ScheduleKind kind);
// Case-insensitive inverse of ScheduleName; kInvalidArgument listing the valid names otherwise.
ScheduleKind ParseScheduleKind(std::string_view name);
// Every kind, in declaration order (for tests and the CLI's help).
std::vector<ScheduleKind> AllScheduleKinds();

StagePlacement PlacementOf(ScheduleKind kind);
// True for kinds that emit I and W (zero-bubble family): they need a split backward at run time.
bool UsesSplitBackward(ScheduleKind kind);

// The rank that runs `stage` under `placement`.
// REQUIRES: num_stages % num_ranks == 0, and num_stages == 2 * num_ranks for kV; 0 <= stage < num_stages.
int StageToRank(StagePlacement placement, int stage, int num_ranks, int num_stages);
// StageToRank for every stage (index = stage).
std::vector<int> StageToRankMap(StagePlacement placement, int num_ranks, int num_stages);
std::vector<int> StageToRankMap(ScheduleKind kind, int num_ranks, int num_stages);
// The stages rank `rank` holds, in increasing stage order.
std::vector<int> StagesOfRank(StagePlacement placement, int rank, int num_ranks, int num_stages);

// The compute-only program of `kind` (index = rank). Throws kInvalidArgument naming the schedule and the
// numbers when the shape does not fit the table above (e.g. "ZBVZeroBubble requires exactly 2 stages per
// rank, got 3 (6 stages on 2 ranks)", "Interleaved1F1B requires ... multiple of the number of rounds").
Program GenerateSchedule(ScheduleKind kind, int num_ranks, int num_stages, int num_microbatches);

}  // namespace tessel::pipelining
