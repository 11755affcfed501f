// pipelining/executor.h — PipelineExecutor: runs one rank's lowered program (lowering.h) over its
// PipelineStages for one training step (PyTorch's _PipelineScheduleRuntime; tessel's own code).
//
// How actions run:
//   F / B / I / W        PipelineStage::Forward / BackwardFull / BackwardInput / BackwardWeight of the
//                        action's stage and microbatch.
//   SEND_* / RECV_*      each run of consecutive comm actions (CommBatches) is posted as one
//                        ProcessGroup::BatchP2P. Sends are not waited on until the end of the step
//                        (isend); a receive is waited on by the compute action that reads its buffer.
//                        Tags (P2PTag) name the sending stage, direction and microbatch.
//   local boundaries     a neighbouring stage on the same rank (bottom of a V) hands its output / input
//                        gradient over by a copy; the program has no comm action there.
//   UNSHARD / RESHARD /  the callbacks of ExecutorOptions when the caller sets any. Otherwise the stages'
//   REDUCE_GRAD          own sharding: before each Step or Eval, the topmost nn::ScheduledShardingState of
//                        each local stage's module tree (fully_shard or Replicate applied after the executor
//                        was built, torchtitan's order, or after an earlier step) is held for the schedule
//                        (no reshard between microbatches, gradients accumulated locally) and each action runs
//                        on the states of its stage; after a Step that reduced (or an Eval) they get their
//                        own settings back, as PyTorch's stage turns sync and resharding back on after its
//                        reduction. fully_shard: each group gathered once per stage visit (once per step when
//                        max_active_stages covers the rank's stages) and reduce-scattered once per step;
//                        Replicate: each bucket reduced once per step. A program lowered without FSDP actions
//                        gets them (AddUnshardReshard over this rank's program, window
//                        ExecutorOptions::max_active_stages). Stages without such a state: no-ops. A step
//                        that raised leaves the held states with its partial gradients (not recoverable in
//                        place: rebuild, or reset them as fully_shard's ResetIterState does).
// Before the first step every local stage runs the shape handshake (stage.h), in increasing stage order.
//
// Errors. Any tessel::Error raised while running an action is rethrown with the same code and the prefix
// "pipeline rank R, action 1F3: ". On the threads backend the failing rank aborts the world, so every
// peer blocked in p2p raises at once (kAborted) with its own rank and action and the failing rank's
// message; on gloo a peer raises kDeadlineExceeded after the group's timeout. Nothing waits forever.
//
// Invariant: after Step returns, every microbatch of every local stage has run F and its backward (B, or
// I and W), every send has completed, and the stages' .grad hold the gradients of the weighted
// microbatch losses (= the full-batch gradients, microbatch.h).
//
// Example:
//   Program lowered = LowerProgram(GenerateSchedule(kind, p, n, m), StageToRankMap(kind, p, n), m, opts);
//   PipelineExecutor exec({&stage}, lowered[pg->rank()], m);
//   StepStats st = exec.Step(idx_BT, targets_BT);     // st.loss on the rank of the last stage
//   optimizer.Step(); optimizer.ZeroGrad();
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "pipelining/action.h"
#include "pipelining/stage.h"

namespace tessel::pipelining {

struct ExecutorOptions {
  // For UNSHARD / RESHARD / REDUCE_GRAD; all unset: the stages' own sharding (see the file comment).
  std::function<void(int stage)> unshard, reshard, reduce_grad;
  // The stages whose parameters may be unsharded at once when the executor drives the sharding and places the FSDP
  // actions itself, in Step's program and Eval's (LowerOptions::max_active_stages).
  int max_active_stages = 3;
  // False: the stages' own sharding states are left alone even without callbacks.
  bool drive_stage_sharding = true;
  // Called right before a stage's forward of microbatch `mb` (and with mb 0 before its shape handshake's
  // forward): how the Python face hands each microbatch's keyword arguments to the stage module. Null: none.
  std::function<void(int stage, int mb)> before_forward;
  // What the loss averages over in one microbatch's targets, used on the rank holding the last stage to
  // weight the microbatch losses (microbatch.h: weight_i = count_i / Σ count). Null: the rows (a mean over
  // dim 0). A mean over the targets that are not ignored (cross-entropy with ignore_index) needs their
  // count: with rows as weights, masked targets unevenly spread over microbatches gave another loss than
  // the full batch's, and a microbatch whose targets were all masked a NaN (0/0) in every gradient.
  std::function<int64_t(const Tensor& targets)> loss_denominator;
  // False: each microbatch's loss is backpropagated as it is, so the gradients are the sum over the
  // microbatches instead of the full batch's (PyTorch's scale_grads=False; torchtitan scales its loss
  // itself). The step's reported loss stays the full batch's.
  bool scale_grads = true;
};

struct StepStats {
  std::optional<double> loss;            // full-batch loss, on the rank holding the last stage
  std::vector<double> microbatch_losses;  // there too: each microbatch's unweighted loss
  std::vector<int> peak_in_flight;       // per local stage (increasing stage): max microbatches in flight
  // Per local stage: growth of the activations ledger across its forward of microbatch 0 (what one
  // in-flight microbatch holds until its backward).
  std::vector<int64_t> activation_bytes_per_microbatch;
  // Wall time of this rank's compute actions by kind (F, B, I, W), not counting the wait for their
  // receives: total seconds and count, the costs a simulation of the schedule needs (simulator.h).
  std::map<ActionKind, std::pair<double, int>> compute_seconds;
  int64_t peak_activation_bytes = 0;     // activations ledger peak on this rank during the step
  int64_t activation_bytes_at_start = 0;  // live activations when the step started
};

class PipelineExecutor {
 public:
  // `stages`: the PipelineStages this rank holds (distinct stage indices, any order; StepStats lists them in
  // increasing stage order); `program`: this rank's lowered
  // program. REQUIRES: every action names a local stage (kInvalidArgument naming the action otherwise).
  PipelineExecutor(std::vector<PipelineStage*> stages, RankProgram program, int num_microbatches,
                   ExecutorOptions options = {});

  // One step on `inputs` (the first stage's batch, e.g. token ids [B, T]) and `targets` (the last
  // stage's); ranks that hold neither may pass either (only its rows are read) or neither, as torch's
  // step() with no arguments: the microbatch sizes are then the last step's, or at the first step
  // microbatch 0's rows (the shape handshake) for each microbatch; a batch that does not split evenly
  // there fails the first receive of a smaller microbatch (a p2p mismatch naming both sides).
  // Splits both into microbatches.
  StepStats Step(const Tensor& inputs, const Tensor& targets);
  // A forward-only step (PyTorch's schedule.eval): the same program without its backward actions (B, I, W,
  // SEND_B, RECV_B, REDUCE_GRAD), under no_grad; the loss and microbatch losses as Step's on the last stage's
  // rank, no gradient touched. Every rank of the pipeline calls it where it would call Step.
  StepStats Eval(const Tensor& inputs, const Tensor& targets);
  // PyTorch's step(finalize_gradients=False): the steps after this run their REDUCE_GRAD actions only while
  // `finalize` is true, so the gradients of steps without it accumulate unreduced (FSDP's unsharded
  // gradients) and the next finalizing step reduces them all at once.
  void set_finalize_gradients(bool finalize) { finalize_gradients_ = finalize; }
  // A schedule without a loss function (torch's forward-only step()): Eval's last stage then runs without
  // targets (its loss function ignores them) and takes its microbatch sizes as a middle rank does.
  void set_targets_optional(bool optional) { targets_optional_ = optional; }
  // ExecutorOptions::scale_grads for the steps from the next one on (torch reads schedule.scale_grads per step).
  void set_scale_grads(bool scale) { options_.scale_grads = scale; }
  // The program Step runs (this rank's, without idle slots; after the first Step or Eval with the FSDP actions
  // the executor added, if any).
  const RankProgram& program() const { return program_; }

 private:
  struct Run;
  class Timed;
  PipelineStage& StageOf(const Action& a) const;
  PipelineStage& StageAt(int stage) const;
  void StartStep(const Tensor& inputs, const Tensor& targets, Run& run);
  void RunCompute(const Action& a, Run& run);
  // Before each step: drive the stages' ScheduledShardingStates, those new since the last step held first (see
  // the file comment).
  void AdoptStageSharding();
  // After a step that reduced the gradients (or an Eval): the held states get their own settings back.
  void ReleaseStageSharding();
  // comm_batches_, eval_program_ and eval_batches_ from program_.
  void BuildDerivedPrograms();
  bool drives_sharding() const { return options_.drive_stage_sharding && !caller_wired_; }
  StepStats RunProgram(const RankProgram& program, const std::vector<std::pair<int, int>>& batches,
                       const Tensor& inputs, const Tensor& targets, bool forward_only);

  std::vector<PipelineStage*> stages_;
  RankProgram program_;
  int num_microbatches_;
  ExecutorOptions options_;
  bool caller_wired_;  // the caller set UNSHARD / RESHARD / REDUCE_GRAD callbacks
  // The stages' driven sharding states (topmost per stage), as found at the last step; shared with the callbacks.
  std::shared_ptr<std::map<int, std::vector<nn::ScheduledShardingState*>>> stage_sharding_ =
      std::make_shared<std::map<int, std::vector<nn::ScheduledShardingState*>>>();
  std::vector<std::pair<int, int>> comm_batches_;
  RankProgram eval_program_;  // program_'s forward actions, FSDP actions placed for them alone (Eval)
  std::vector<std::pair<int, int>> eval_batches_;
  std::vector<int64_t> last_sizes_;  // the last step's microbatch rows (for a middle rank's Step with no batch)
  bool finalize_gradients_ = true;
  bool targets_optional_ = false;
};

}  // namespace tessel::pipelining
