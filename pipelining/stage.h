// pipelining/stage.h — PipelineStage: one stage module on one pipeline rank, its shape handshake, the
// p2p buffers it reuses, and the per-microbatch forward / backward state the executor drives
// (torch.distributed.pipelining.PipelineStage; tessel's own code).
//
// Composition order (DESIGN.md, torchtitan): split the model into stage modules first
// (pipelining/model_split.h), then per stage module apply tensor parallelism, activation checkpointing and
// fully_shard; then wrap each stage module in a PipelineStage.
//
// [Note: shape handshake]
// Shapes are inferred once, before the first step, from microbatch 0 (PyTorch's _shape_inference). Every
// rank calls InferShapes for its stages in increasing stage order (a chain 0 → 1 → … → n-1 over p2p, which
// cannot deadlock). The first stage runs its forward under no_grad on microbatch 0 to learn its output
// shape and sends a small int64 header (ndim, dtype, dims) to the next stage's rank; every other stage
// receives the header, runs its forward under no_grad on zeros of that shape (so a stage that cannot
// take its predecessor's output fails here, before training, naming both stages and the shape) and sends
// its own output header on. Dim 0 is the batch: a microbatch with other rows uses the same shape with
// dim 0 replaced, so uneven microbatches need no new handshake. Receive buffers (activations forward,
// gradients backward) are allocated once per microbatch index (comm-buffer ledger) and reused each step.
//
// Invariant: for every microbatch, Forward precedes the backward (B, or I then W); I stores the deferred
// weight work that only W of the same microbatch consumes; a stage's gradients accumulate in .grad over
// the microbatches of a step (the executor zeroes them between steps through the optimizer).
//
// Example:
//   PipelineStage stage(*stage_module, /*stage_index=*/1, /*num_stages=*/2, pg);
//   stage.InferShapes(Tensor());                  // receives stage 0's output header
//   stage.PrepareStep({2, 2});                     // two microbatches of 2 rows
//   pg->Recv(stage.ActivationRecvBuffer(0), stage.prev_rank())->Wait();
//   stage.Forward(0, Tensor(), target0);           // last stage: loss, weighted
//   stage.BackwardFull(0);                         // grads in .grad; InputGradToSend(0) for stage 0
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/autograd/split_backward.h"
#include "core/nn/module.h"

namespace tessel::pipelining {

// Maps the last stage's output and the microbatch's target to a scalar loss (a mean over the
// microbatch); the stage multiplies it by the microbatch's loss weight (microbatch.h).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

class PipelineStage {
 public:
  // `stage_to_rank[s]` is the group rank holding stage s (default: looped, s % group->size()).
  // REQUIRES: 0 <= stage_index < num_stages; stage_to_rank[stage_index] == group->rank(); a loss_fn on the
  // last stage (kInvalidArgument otherwise, naming the stage).
  PipelineStage(nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                LossFn loss_fn = nullptr, std::vector<int> stage_to_rank = {});
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  int stage_index() const { return stage_index_; }
  int num_stages() const { return num_stages_; }
  bool is_first() const { return stage_index_ == 0; }
  bool is_last() const { return stage_index_ == num_stages_ - 1; }
  nn::Module& module() { return module_; }
  comm::ProcessGroup& group() { return *group_; }
  int prev_rank() const;  // REQUIRES: !is_first()
  int next_rank() const;  // REQUIRES: !is_last()
  // The neighbouring stage lives on this rank too (the bottom of a V placement): no p2p, a local hand-off.
  bool prev_is_local() const { return !is_first() && prev_rank() == group_->rank(); }
  bool next_is_local() const { return !is_last() && next_rank() == group_->rank(); }

  // The shape handshake (see the Note). `first_input` is microbatch 0 on the first stage (ignored
  // elsewhere). `expected_input` (optional, non-first stages) is the input shape this stage was built for;
  // a different received shape raises kInvalidArgument naming both stages and both shapes. When the
  // previous stage is local, `local_prev` is it (already inferred) and no header is received.
  void InferShapes(const Tensor& first_input, const std::optional<Shape>& expected_input = std::nullopt,
                   const PipelineStage* local_prev = nullptr);
  bool shapes_inferred() const { return inferred_; }
  // torch's input_args / output_args: the microbatch-0 shapes this stage was built for. The handshake then
  // checks the input (received, or microbatch 0 on the first stage) and the output it computes against them
  // (kInvalidArgument naming the stage and both shapes). An explicit `expected_input` of InferShapes wins
  // on a non-first stage (where it applies).
  void SetExpectedShapes(std::optional<Shape> input, std::optional<Shape> output) {
    expected_input_ = std::move(input);
    expected_output_ = std::move(output);
  }
  const Shape& input_shape() const;   // microbatch 0's input (non-first stages)
  const Shape& output_shape() const;  // microbatch 0's output

  // Starts a step: per-microbatch rows (dim 0 of each microbatch) and loss weights; clears per-microbatch
  // state (throws kFailedPrecondition if a microbatch of the last step was left without backward).
  // `grad_weights` (one per microbatch, or empty: the loss weights) multiply each microbatch's loss for the
  // backward only: all 1 is PyTorch's scale_grads=False (gradients summed over the microbatches); the
  // reported loss stays Σ loss_weight · loss. A microbatch of loss weight 0 backpropagates zeros either way.
  void PrepareStep(const std::vector<int64_t>& microbatch_rows, const std::vector<double>& loss_weights,
                   const std::vector<double>& grad_weights = {});
  int num_microbatches() const { return static_cast<int>(rows_.size()); }

  Tensor ActivationRecvBuffer(int mb);  // input-shaped, rows of `mb` (non-first stages)
  Tensor GradRecvBuffer(int mb);        // output-shaped, rows of `mb` (non-last stages)

  // F: input = microbatch `mb` on the first stage, ignored elsewhere (the activation buffer is read).
  // `target` is used on the last stage: loss = loss_fn(output, target) · weight[mb].
  void Forward(int mb, const Tensor& input, const Tensor& target);
  Tensor OutputToSend(int mb) const;  // REQUIRES: Forward(mb) ran, !is_last()
  // B, I and W. Non-last stages read the gradient buffer. W without I is kFailedPrecondition.
  void BackwardFull(int mb);
  void BackwardInput(int mb);
  void BackwardWeight(int mb);
  Tensor InputGradToSend(int mb) const;  // REQUIRES: B or I of mb ran, !is_first()

  // Σ weight_i · loss_i over the microbatches run this step (last stage only): the full-batch loss.
  double StepLoss() const;
  // Each microbatch's loss_fn value this step, unweighted (NaN for a microbatch with no target to
  // average over, which weighs 0): what torch's schedule.step(losses=[]) collects (last stage only).
  std::vector<double> MicrobatchLosses() const;
  // Microbatches whose forward ran and whose backward (B, or W) has not finished.
  int num_in_flight() const;
  // Ends a forward-only step (PipelineExecutor::Eval): every forwarded microbatch drops its tensors and
  // counts as done, so the next PrepareStep does not take it for a missing backward. The losses stay.
  void EndForwardOnly();

 private:
  struct MicrobatchState;
  MicrobatchState& State(int mb, const char* what);
  Tensor BufferFor(std::vector<Tensor>& buffers, int mb, const Shape& shape, DType dtype);
  void SendHeader(const Tensor& output);
  Shape RecvHeader(DType* dtype);
  std::string Where(int mb) const;

  nn::Module& module_;
  int stage_index_, num_stages_;
  comm::ProcessGroupPtr group_;
  LossFn loss_fn_;
  std::vector<int> stage_to_rank_;
  bool inferred_ = false;
  Shape input_shape_, output_shape_;
  std::optional<Shape> expected_input_, expected_output_;
  DType input_dtype_ = DType::kFloat32, output_dtype_ = DType::kFloat32;
  std::vector<int64_t> rows_;
  std::vector<double> weights_;
  std::vector<double> grad_weights_;  // empty: weights_
  std::vector<Tensor> act_buffers_, grad_buffers_;
  std::vector<std::unique_ptr<MicrobatchState>> states_;
};

// The p2p tag of one activation (forward) or gradient (backward) transfer from `stage` for `mb`, so
// sends and receives of interleaved stages between the same two ranks never pair up wrongly.
int P2PTag(bool backward, int stage, int mb);

}  // namespace tessel::pipelining
