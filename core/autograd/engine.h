// core/autograd/engine.h — reverse-mode execution: Backward, tensor hooks, end-of-backward callbacks.
//
// Invariant: Backward runs every node reachable from the roots exactly once, after all gradients
// flowing into it have been summed; each leaf's .grad ends up as the sum of all contributions (added
// to any existing .grad). Without retain_graph, saved tensors are freed as nodes run and a second
// backward through the same nodes raises kFailedPrecondition. Grad computes gradients without accumulating
// them (torch.autograd.grad).
//
// create_graph (higher-order gradients, torch's): the backward formulas run with grad mode on, so the
// gradients they compute carry their own graph (a .grad accumulated out of place, a Grad result) and can be
// differentiated again: Hessian-vector products, gradient penalties. It keeps the graph it ran through
// (torch's retain_graph defaults to create_graph): the new graph reaches into it. Saved outputs are re-linked to the
// node that produced them, so formulas in terms of the output (tanh, exp, sigmoid, ...) differentiate
// correctly. An op reached in such a pass whose backward is not itself differentiable raises
// kUnimplemented naming it (never a silently missing term); see core/autograd/call.h. As in torch,
// Backward with create_graph makes a leaf's .grad reference a graph that references the leaf: reset the
// .grad (or use Grad, which accumulates nothing) when done, or the cycle keeps both alive.
//
// Example:
//   Tensor loss = Mean(Mul(w, x));
//   Backward(loss);                      // w.grad() now holds dloss/dw
//   RegisterHook(h, [](const Tensor& g) { return Mul(g, Scalar(2)); });   // scales the gradient of h
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor/tensor.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {

// Backpropagates from `root`. `grad` defaults to ones for a one-element root (error otherwise).
void Backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false,
              bool create_graph = false);
void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph = false,
              bool create_graph = false);
// torch's backward(inputs=): only the nodes on a path to one of `inputs` run; a leaf input's .grad accumulates
// as in Backward (its hooks and post-accumulate hooks run), a non-leaf input's .grad too (as retain_grad's);
// nothing else changes. An input the roots do not reach keeps its .grad (torch's), except a DTensor leaf
// (a fully_shard parameter, whose unsharded copy the forward used): kFailedPrecondition. Empty: Backward.
void Backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph,
              const TensorList& inputs);

// torch.autograd.grad: the gradients of `outputs` (seeded with `grad_outputs`; empty or undefined entries
// are ones for one-element outputs) with respect to `inputs` (leaves or not), returned in inputs' order;
// no .grad anywhere changes and only nodes on a path from the outputs to an input run (tensor hooks on
// the way and on the inputs run); an input's own grad_fn runs only when another input lies below it,
// so a later backward through it still finds its saved tensors (torch's rule). An input the outputs do not depend on gives an undefined
// tensor with allow_unused, else kInvalidArgument; an input that does not require grad is
// kInvalidArgument. retain_graph and create_graph as Backward's.
TensorList Grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false, bool create_graph = false);

// Takes a registered hook out again (torch's RemovableHandle.remove(): core/tensor/hook_list.h); nothing once the
// tensor or graph node holding it is gone, or on a second call.
using HookRemover = std::function<void()>;
// Gradient hook on `t` (leaf or not). A returned defined tensor replaces the gradient.
HookRemover RegisterHook(const Tensor& t, TensorHook hook);
// Runs after a leaf's .grad was updated in a backward pass.
HookRemover RegisterPostAccumulateGradHook(const Tensor& leaf, PostAccumulateGradHook hook);
// Keep the gradient of a non-leaf tensor in .grad (like torch's retain_grad()).
void RetainGrad(const Tensor& t);

// Queues `fn` to run once the current backward pass has finished all nodes (FSDP's root post-backward).
// REQUIRES: called from inside a backward pass (a hook or backward formula) on this thread.
void QueueCallback(std::function<void()> fn);
bool InBackward();
// The backward pass running on this thread: a number no other pass of the process has, 0 outside one. A
// hook that queued a callback can tell from it that the pass it queued for ended without running it (an
// exception escaped that pass): Replicate resets its buckets then.
uint64_t BackwardPassId();
// Whether this thread runs a create_graph backward: formulas whose fused kernels have no gradient of their
// own may compute the same value from differentiable ops instead (layer_norm, rms_norm).
bool CreatingGraph();

}  // namespace tessel
