// core/autograd/split_backward.h — the split backward zero-bubble pipeline schedules need: BackwardInput
// (the "I" action) computes the gradients of given inputs now and returns the rest of the backward as a
// WeightGradTask; BackwardWeight (the "W" action) runs that task later to fill the parameters' .grad.
//
// [Note: split backward]
// Goal: I then W gives bitwise the same input gradients and .grad values as one full Backward, with no
// node's forward or backward formula evaluated twice for the same gradient ("no recomputation").
// Design (PyTorch's stage_backward_input / stage_backward_weight, done inside the engine):
//   1. From the roots, find the reachable graph, then the nodes *on the input path*: those from which some
//      input's accumulator is reachable. Nodes off that path feed only parameters (or nothing we need now).
//      An off-path node can never feed an on-path node (it would then be on the path itself).
//   2. I runs the on-path nodes in the engine's usual order (highest sequence number first). Each node is
//      applied with a mask (Node::ApplyMasked) that asks only for the gradients of edges leading to on-path
//      nodes: for Linear/matmul that is dX = dY·W, and dW = dYᵀ·X is not computed. If the node also has
//      edges leading off the path (its weight, or a branch to parameters), its post-hook output gradients
//      (dY) and the node itself (with its saved X) are kept in the task; otherwise its saved tensors are
//      freed at once. The gradients reaching the inputs are returned, not accumulated into .grad.
//   3. W replays the full backward's order: it walks the I order (each kept node is applied again, masked
//      to its off-path edges only: dW) interleaved by sequence number with the off-path nodes that become
//      ready (AccumulateGrad, views of weights, whole parameter-only branches). Because the interleaving is
//      the greedy order one full backward would take, every gradient buffer sums its contributions in the
//      same order, hence bitwise equality; each formula computes each input gradient independently of the
//      mask (true of every core/ops formula: matmul, linear, norms, elementwise).
// Kernels: I and W together dispatch, op by op, the kernels of one full B (a test counts them), except a
// fused backward kernel that returns the input and the weight gradients from one call (layer_norm_backward):
// it runs once per half with disjoint output masks, re-reading its saved input (PyTorch does the same).
// Costs: between I and W the task holds, per kept node, dY and the node's saved tensors (the forward
// activations its dW needs); everything else of the graph is freed by I. Output hooks run once (in I for
// on-path nodes); leaf hooks and post-accumulate-grad hooks run in W. Callbacks queued during I run at the
// end of I, those queued during W at the end of W. A node that is not an OpNode (a module backward hook)
// with edges both on and off the path runs its function in both halves (masked): it must be pure.
// Inputs must be leaves that require grad (a pipeline stage's received activations are); an input that
// no root reaches gets an undefined gradient.
//
// Example:
//   Tensor x = recv_buffer.detach(); x.set_requires_grad(true);
//   Tensor y = stage(x);
//   SplitBackwardResult r = BackwardInput({y}, {dy}, {x});   // r.input_grads[0] = dL/dx, send it now
//   ...                                                        // other microbatches' F and I
//   BackwardWeight(r.weight_task);                            // parameters' .grad += dL/dW
#pragma once

#include <memory>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {
namespace autograd {
class Node;
}

// The deferred weight-gradient half of one backward. Move-only; runs at most once.
class WeightGradTask {
 public:
  WeightGradTask();
  ~WeightGradTask();
  WeightGradTask(WeightGradTask&&) noexcept;
  WeightGradTask& operator=(WeightGradTask&&) noexcept;

  // True between a BackwardInput that made it and the BackwardWeight that runs it.
  bool pending() const;
  // Nodes kept for W (each holds its dY and saved activations).
  size_t num_deferred_nodes() const;

  struct State;

 private:
  friend struct WeightGradTaskAccess;
  std::unique_ptr<State> state_;
};

struct SplitBackwardResult {
  TensorList input_grads;  // one per input; undefined when no root reaches it
  WeightGradTask weight_task;
};

// The I half: gradients of `inputs` from `roots` seeded with `grads` (undefined: ones for a one-element
// root). REQUIRES: each input is a defined leaf that requires grad (kInvalidArgument names the index).
SplitBackwardResult BackwardInput(const TensorList& roots, const TensorList& grads, const TensorList& inputs);

// The W half. REQUIRES: `task` came from BackwardInput and has not run (kFailedPrecondition otherwise,
// e.g. W before I).
void BackwardWeight(WeightGradTask& task);

}  // namespace tessel
