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
// cannot deadlock). The first stage runs its forward under no_grad on microbatch 0 to learn its outputs
// and sends a small int64 header (the tensor count; per tensor ndim, dtype, dims) to the next stage's rank;
// every other stage receives the header, runs its forward under no_grad on zeros of those shapes, one
// positional input per tensor (so a stage that cannot take its predecessor's outputs fails here, before
// training, naming both stages and the shapes) and sends its own output header on. A tensor that crosses a
// boundary with dim 0 equal to the rows of the handshake's microbatch (on this rank: its first step's
// microbatch 0, in the rows of what the rank is given, the batch or else the targets or its input) is batched:
// a microbatch with other rows uses the same shape with dim 0 replaced, so uneven microbatches need no new
// handshake. Any other tensor (a flattened [B·T, H] activation, rotary tables, a 0-d scalar) keeps the
// handshake's shape in every microbatch, as torch's static shapes (the last stage's outputs, which travel
// nowhere, may be anything its loss takes). Receive buffers (activations forward, gradients backward) are allocated
// once per microbatch index (comm-buffer ledger) and reused each step. Floating-point tensors carry
// gradients back; integer and bool tensors (positions, masks) travel forward only, which both sides know
// from the header's dtypes (torch's stages would try to make them require grad and fail).
//
// Invariant: for every microbatch, Forward precedes the backward (B, or I then W); I stores the deferred
// weight work that only W of the same microbatch consumes; a stage's gradients accumulate in .grad over
// the microbatches of a step (the executor zeroes them between steps through the optimizer).
//
// Example:
//   PipelineStage stage(*stage_module, /*stage_index=*/1, /*num_stages=*/2, pg);
//   stage.InferShapes(Tensor());                  // receives stage 0's output header
//   stage.PrepareStep({2, 2});                     // two microbatches of 2 rows
//   pg->Recv(stage.ActivationRecvBuffers(0)[0], stage.prev_rank(), P2PTag(false, 0, 0))->Wait();
//   stage.Forward(0, Tensor(), target0);           // last stage: loss, weighted
//   stage.BackwardFull(0);                         // grads in .grad; InputGradsToSend(0) for stage 0
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
// The same over every tensor the last stage's module returns, in order (a stage module may return several).
using MultiOutputLossFn = std::function<Tensor(const TensorList& outputs, const Tensor& target)>;

// The most tensors one stage boundary carries (the shape header's capacity and the p2p tags' index field).
inline constexpr int kMaxStageTensors = 8;

class PipelineStage {
 public:
  // `stage_to_rank[s]` is the group rank holding stage s (default: looped, s % group->size()).
  // REQUIRES: 0 <= stage_index < num_stages; stage_to_rank[stage_index] == group->rank(); a loss_fn on the
  // last stage (kInvalidArgument otherwise, naming the stage).
  PipelineStage(nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                LossFn loss_fn = nullptr, std::vector<int> stage_to_rank = {});
  // A last stage whose module returns several tensors: `loss_fn` sees all of them (LossFn needs exactly one).
  PipelineStage(nn::Module& module, int stage_index, int num_stages, comm::ProcessGroupPtr group,
                MultiOutputLossFn loss_fn, std::vector<int> stage_to_rank);
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
  // elsewhere). `expected_inputs` (optional, non-first stages) are the input shapes this stage was built for;
  // different received shapes raise kInvalidArgument naming both stages and both shape lists. When the
  // previous stage is local, `local_prev` is it (already inferred) and no header is received.
  void InferShapes(const Tensor& first_input, const std::optional<std::vector<Shape>>& expected_inputs = std::nullopt,
                   const PipelineStage* local_prev = nullptr);
  bool shapes_inferred() const { return inferred_; }
  // torch's input_args / output_args: the microbatch-0 shapes this stage was built for (on the first stage
  // only the first input is the stage's own: it is checked against microbatch 0). The handshake then checks
  // the inputs (received, or microbatch 0 on the first stage) and the outputs it computes against them
  // (kInvalidArgument naming the stage and both shape lists). An explicit `expected_inputs` of InferShapes
  // wins on a non-first stage (where it applies).
  void SetExpectedShapes(std::optional<std::vector<Shape>> inputs, std::optional<std::vector<Shape>> outputs) {
    expected_inputs_ = std::move(inputs);
    expected_outputs_ = std::move(outputs);
  }
  // Microbatch 0's inputs (non-first stages) and outputs, one shape per tensor of the stage boundary; the
  // singular forms are the first tensor's.
  const std::vector<Shape>& input_shapes() const;
  const std::vector<Shape>& output_shapes() const;
  const Shape& input_shape() const { return input_shapes().front(); }
  const Shape& output_shape() const { return output_shapes().front(); }

  // torch's dw_builder: with one set, the backward of a microbatch (B, or I) is the module's whole autograd
  // backward, after which the builder is called for the runner of what the module deferred (its weight
  // gradients computed by hand, say): B runs that runner at once, I keeps it for the microbatch's W. Without
  // one, the autograd engine splits the backward itself (split_backward.h).
  using DwBuilder = std::function<std::function<void()>()>;
  void SetDwBuilder(DwBuilder builder) { dw_builder_ = std::move(builder); }

  // Starts a step: per-microbatch rows (dim 0 of each microbatch) and loss weights; clears per-microbatch
  // state (throws kFailedPrecondition if a microbatch of the last step was left without backward).
  // `grad_weights` (one per microbatch, or empty: the loss weights) multiply each microbatch's loss for the
  // backward only: all 1 is PyTorch's scale_grads=False (gradients summed over the microbatches); the
  // reported loss stays Σ loss_weight · loss. A microbatch of loss weight 0 backpropagates zeros either way.
  void PrepareStep(const std::vector<int64_t>& microbatch_rows, const std::vector<double>& loss_weights,
                   const std::vector<double>& grad_weights = {});
  int num_microbatches() const { return static_cast<int>(rows_.size()); }

  // Receive buffers of microbatch `mb`, shaped by the handshake with dim 0 at its rows: one per input tensor
  // (non-first stages), and one per floating-point output (non-last stages; integer and bool tensors, such
  // as positions or masks, travel forward only and get no gradient).
  TensorList ActivationRecvBuffers(int mb);
  TensorList GradRecvBuffers(int mb);

  // F: input = microbatch `mb` on the first stage, ignored elsewhere (the activation buffers are read and
  // passed to the module as its positional inputs, in order). `target` is used on the last stage: loss =
  // loss_fn(outputs, target) · weight[mb].
  void Forward(int mb, const Tensor& input, const Tensor& target);
  TensorList OutputsToSend(int mb) const;  // REQUIRES: Forward(mb) ran, !is_last(); one per output
  // B, I and W. Non-last stages read the gradient buffers. W without I is kFailedPrecondition.
  void BackwardFull(int mb);
  void BackwardInput(int mb);
  void BackwardWeight(int mb);
  // One per floating-point input (zeros where the outputs do not depend on it). REQUIRES: B or I of mb ran,
  // !is_first().
  TensorList InputGradsToSend(int mb) const;

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
  // A handshake shape at microbatch mb: dim 0 at its rows if the tensor is batched (the Note), else as it is.
  Shape ShapeAt(Shape handshake, int mb) const;
  TensorList BuffersFor(std::vector<TensorList>& buffers, int mb, const std::vector<Shape>& shapes,
                        const std::vector<DType>& dtypes);
  void SendHeader(const TensorList& outputs);
  std::vector<Shape> RecvHeader(std::vector<DType>* dtypes);
  // The backward's roots and their gradients: the weighted loss (last stage), else the floating outputs that
  // require grad with their received gradients.
  void BackwardRoots(MicrobatchState& s, int mb, TensorList* roots, TensorList* grads);
  // The microbatch's whole autograd backward (B, or I under a dw_builder): parameters' .grad and the input
  // gradients to send; drops the microbatch's tensors.
  void WholeBackward(MicrobatchState& s, int mb);
  std::string Where(int mb) const;

  nn::Module& module_;
  int stage_index_, num_stages_;
  comm::ProcessGroupPtr group_;
  MultiOutputLossFn loss_fn_;
  DwBuilder dw_builder_;
  std::vector<int> stage_to_rank_;
  bool inferred_ = false;
  std::vector<Shape> input_shapes_, output_shapes_;
  std::optional<std::vector<Shape>> expected_inputs_, expected_outputs_;
  std::vector<DType> input_dtypes_, output_dtypes_;
  std::vector<int64_t> rows_;
  int64_t handshake_rows_ = 0;  // rows_[0] of the first step: which shapes are batched (the Note)
  std::vector<double> weights_;
  std::vector<double> grad_weights_;  // empty: weights_
  std::vector<TensorList> act_buffers_, grad_buffers_;  // [microbatch][tensor]
  std::vector<std::unique_ptr<MicrobatchState>> states_;
};

// The p2p tag of one activation (forward) or gradient (backward) transfer from `stage` for `mb` (tensor
// `index` of the boundary), so sends and receives of interleaved stages between the same two ranks never
// pair up wrongly.
int P2PTag(bool backward, int stage, int mb, int index = 0);

}  // namespace tessel::pipelining
