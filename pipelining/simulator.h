// pipelining/simulator.h — what a program costs before it runs: given per-action costs, each rank runs its
// actions in order, each as early as its inputs allow, giving the makespan, each rank's idle fraction (the
// bubble), the peak number of in-flight activations per stage and the timeline the SVG draws; plus
// PyTorch's lock-step simulation (`_simulate_comms_compute`) whose step count is the IR tests' metric.
//
// Model. An action starts at max(its rank is free, its inputs are ready) and holds its rank for its cost:
//   F(s,m)    needs F(s-1,m), plus `transfer` when stage s-1 lives on another rank
//   B/I(s,m)  needs F(s,m) and B/I(s+1,m) (plus `transfer` across ranks); the last stage needs only F(s,m)
//   W(s,m)    needs I(s,m)
// B costs backward_input + backward_weight. SEND/RECV take no rank time: like PyTorch's runtime they post a
// non-blocking isend/irecv, the compute that needs the data waits for it, and `transfer` is the edge latency.
// UNSHARD/RESHARD/REDUCE_GRAD cost what `costs` says (0 by default). Idle slots in a compute-only program are
// ignored: the order of actions, not the padding, defines the schedule.
//
// In-flight activations of a stage: microbatches whose F has finished and whose backward has not released
// them yet — a B releases at its end, I+W release at the end of W (the weight gradient still needs the stage
// input). Peak = the maximum over time.
//
// Invariant: the simulation never reorders a rank's actions; if a rank's next action can never become
// ready the program is malformed and Simulate throws kInvalidArgument naming the blocked actions.
//
// Closed forms the tests hold the simulation to (unit costs F = I = W = 1, transfer 0, p ranks, m micro-
// batches, v stages per rank; bubble = idle time / makespan, equal on every rank):
//   1F1B (and GPipe):  (p - 1) / (m + p - 1)
//       PipeDream-Flush, Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
//       Clusters Using Megatron-LM", §2.2.1: bubble time (p-1)(tf+tb) against m(tf+tb) of work.
//   Interleaved 1F1B:  (p - 1) / (v·m + p - 1)
//       Narayanan et al. 2021, §2.2.2: the bubble time shrinks by v, (p-1)(tf+tb)/v.
//   ZB-H1:             (p - 1)(F + I - W) / ((p - 1)(F + I - W) + m(F + I + W)) = (p - 1) / (3m + p - 1)
//       Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (ICLR 2024), §3.1: ZB-H1's bubble is
//       (p-1)(T_F + T_B - T_W) against 1F1B's (p-1)(T_F + T_B + T_W), a third of it when all three are equal.
// Peak in-flight activations: GPipe m on every stage; 1F1B p - s on stage s (m >= p).
//
// Example:
//   SimulationResult r = Simulate(prog, StageToRankMap(kind, p, p), {});
//   r.makespan; r.bubble; r.peak_in_flight[0];
#pragma once

#include <span>
#include <vector>

#include "pipelining/action.h"

namespace tessel::pipelining {

struct ActionCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  double transfer = 0;  // latency of one SEND -> RECV hop between ranks
  double unshard = 0;
  double reshard = 0;
  double reduce_grad = 0;
  double full_backward() const { return backward_input + backward_weight; }
  // Cost of holding a rank for `kind` (0 for SEND/RECV).
  double Of(ActionKind kind) const;
};

struct TimedAction {
  int rank = 0;
  Action action;
  double start = 0;
  double end = 0;
};

struct SimulationResult {
  double makespan = 0;
  std::vector<double> busy;                // per rank: total cost of its actions
  std::vector<double> idle_fraction;       // per rank: 1 - busy / makespan
  double bubble = 0;                       // mean of idle_fraction over ranks
  std::vector<int> peak_in_flight;         // per stage
  std::vector<TimedAction> timeline;       // every action, in (rank, program order)
};

// Event simulation of `program` (compute-only or lowered) under `costs`.
SimulationResult Simulate(const Program& program, std::span<const int> stage_to_rank, const ActionCosts& costs = {});

// PyTorch's lock-step simulation of a lowered program: one action per rank per step, a rank idles (empty
// slot) while its next action is not ready. Returns the per-rank step grid; its length is the step count.
// Throws kInvalidArgument naming each rank's blocked action if no rank can progress.
Program SimulateLockstep(const Program& lowered, std::span<const int> stage_to_rank);

// The closed forms above (see the header comment for the sources).
double BubbleFraction1F1B(int num_ranks, int num_microbatches);
double BubbleFractionInterleaved(int num_ranks, int stages_per_rank, int num_microbatches);
double BubbleFractionZeroBubbleH1(int num_ranks, int num_microbatches, const ActionCosts& costs = {});

}  // namespace tessel::pipelining
