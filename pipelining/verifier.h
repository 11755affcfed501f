// pipelining/verifier.h — proves, before anything runs, that a program can run: the checks of PyTorch's
// `_validate_schedule` for compute-only programs, the pairing and ordering of a lowered program's sends and
// receives, and a run of every rank as far as its waits allow, which rejects any cycle of waits.
//
// Invariant: a program that passes VerifyLoweredProgram completes on the executor when sends are
// non-blocking and a compute action blocks only on its own RECV: no hang, no action on missing input.
// A rejected program raises kInvalidArgument whose message starts "pipeline program: rank R, step S: action
// A ..." for the first bad action (lowest step, then lowest rank) and ends with the program grid.
//
// Checks (compute-only):
//   - every action's stage is in [0, num_stages), its microbatch in [0, m) (present iff the kind has one)
//   - only F / B / I / W appear
//   - each stage lives on one rank
//   - per stage and microbatch: F once, then either B once or I once then W once; nothing twice
//   - every stage has m forwards and m backwards (B, or I and W in equal number)
// Checks (lowered), in addition, on the program with its comm actions:
//   - each stage runs on the rank `stage_to_rank` names
//   - every F of a stage > 0 whose previous stage lives on another rank comes after its RECV_F on the same
//     rank (every I/B of a non-last stage after its RECV_B); across one rank (the bottom of a V) after the
//     neighbour's compute instead; each SEND after the compute that produced its data
//   - each SEND has exactly one matching RECV on the neighbouring stage's rank, and each RECV one SEND
//   - executing all ranks with non-blocking SENDs/RECVs, where a compute waits until the SEND of its input
//     was issued, finishes (no cycle of waits); a stuck program names each rank's blocked action
//   - UNSHARD/RESHARD alternate per stage, and every compute on a stage that was ever unsharded runs while
//     it is unsharded; REDUCE_GRAD comes once, after the stage's last backward
//
// Example:
//   std::vector<int> where = VerifyComputeProgram(prog, /*num_stages=*/4, /*num_microbatches=*/8);
//   VerifyLoweredProgram(lowered, where, 8);
#pragma once

#include <span>
#include <vector>

#include "pipelining/action.h"

namespace tessel::pipelining {

// Verifies a compute-only program and returns the stage → rank map it implies (index = stage).
std::vector<int> VerifyComputeProgram(const Program& program, int num_stages, int num_microbatches);

// Verifies a lowered program (compute plus SEND/RECV, UNSHARD/RESHARD, REDUCE_GRAD) against `stage_to_rank`
// (index = stage). PyTorch's lock-step step count is SimulateLockstep(program, stage_to_rank).size() of the
// longest rank (simulator.h).
void VerifyLoweredProgram(const Program& program, std::span<const int> stage_to_rank, int num_microbatches);

}  // namespace tessel::pipelining
