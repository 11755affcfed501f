// core/autograd/call.h — CallOp: dispatch an op and record it for backward.
//
// Invariant: CallOp records a node iff grad mode is on, the op has a backward formula and some input
// requires grad; then every floating, differentiable output requires grad and points at that node.
// The dispatch itself runs with grad mode off, so nothing under it (kernels, DTensor redistributes)
// records history. In-place ops on tensors that require grad are rejected while grad mode is on.
//
// Example:
//   Tensor Add(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kAdd, {a, b}); }
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "core/dispatch/attrs.h"
#include "core/dispatch/op.h"

namespace tessel::autograd {

TensorList CallOp(const OpDef& op, TensorList inputs, const Attrs& attrs = Attrs());
// For single-output ops.
Tensor CallOp1(const OpDef& op, TensorList inputs, const Attrs& attrs = Attrs());

// Identity on `inputs` whose backward runs `backward(grads) -> input grads` (same count). Outputs are
// new handles aliasing the inputs. Used for module backward hooks and FSDP's pre-backward unshard.
// Inputs that do not require grad pass through unrecorded; if none requires grad, outputs == inputs.
// Gradients are not materialized: `backward` sees an undefined gradient for an output nobody used and
// should pass it on undefined (the tensors behind it then get none, as in torch).
TensorList ApplyBackwardFunction(std::string name, const TensorList& inputs,
                                 std::function<TensorList(const TensorList& grads)> backward);

// torch.autograd.Function's recording: `outputs` (computed by the caller without recording) become the
// outputs of one node whose next edges are `inputs` and whose backward runs `backward(grads) -> input
// grads` (one gradient per input, undefined for none). differentiable[i] false leaves output i out of the
// graph (ctx.mark_non_differentiable); materialize_grads fills an unused output's gradient with zeros
// (torch's default) instead of passing it undefined. Outputs are new handles (aliasing the given ones).
// With grad mode off or no input requiring grad, the outputs come back as they are. `release` (optional)
// runs when a backward without retain_graph frees the node's saved tensors (torch frees ctx.saved_tensors).
TensorList ApplyCustomFunction(std::string name, const TensorList& inputs, const TensorList& outputs,
                               const std::vector<bool>& differentiable,
                               std::function<TensorList(const TensorList& grads)> backward, bool materialize_grads,
                               std::function<void()> release = nullptr);

// During a custom Function's backward (on the thread running it): `saved`, one of that Function's outputs as
// its forward saved it (without history), as a tensor sharing its memory whose grad_fn is the running
// Function's node at output `index` — torch's SavedVariable unpacking of a saved output, so a create_graph
// backward differentiates through it (Exp's `grad * result`). Outside such a backward, or for a non-floating
// tensor, `saved` itself.
Tensor ReattachFunctionOutput(const Tensor& saved, int index);

}  // namespace tessel::autograd
