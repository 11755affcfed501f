// core/dispatch/op.h — OpDef (what an op is: kernels, backward formula, aliasing) and the op registry.
//
// Invariant: every tensor op in tessel is one registered OpDef with a unique name, and every call goes
// through Dispatch() (core/dispatch/dispatcher.h), usually via autograd::CallOp which records history.
// One op family = one file in core/ops/ that registers its OpDefs plus a file of sharding rules in
// dtensor/rules/ with the same name (DESIGN.md).
//
// Example (in core/ops/<family>.cc):
//   const OpDef& kNeg = RegisterOp({.name = "neg", .cpu = NegKernel, .backward = NegBackward});
//   Tensor Neg(const Tensor& x) { return autograd::CallOp1(kNeg, {x}); }
#pragma once

#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/dispatch/attrs.h"
#include "core/tensor/tensor.h"

namespace tessel {

// A kernel computes the outputs of one op call on local (dense) tensors of one device type.
using Kernel = std::function<TensorList(std::span<const Tensor> inputs, const Attrs& attrs)>;

// What a backward formula sees. Entries of inputs/outputs are undefined unless the OpDef saves them.
// An undefined grad_outputs[i] means "zero gradient for output i".
struct BackwardContext {
  const Attrs& attrs;
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  std::span<const Tensor> grad_outputs;
  std::span<const bool> needs_input_grad;
  // Every input's shape (the global shape for a DTensor), saved or not: a formula that needs only shapes (add's
  // sum back to a broadcast input) need not save the input, so an in-place write to it later is no error.
  std::span<const Shape> input_sizes;
};
// Returns one gradient per input (undefined = no gradient). Written with ordinary ops, so it runs
// distributed when its tensors are DTensors.
using BackwardFn = std::function<TensorList(const BackwardContext& ctx)>;

struct OpDef {
  std::string name;
  Kernel cpu;
  Kernel cuda;
  BackwardFn backward;          // null: not differentiable (outputs never require grad)
  bool save_inputs = true;      // keep inputs for backward
  // With save_inputs: keep only these inputs (empty: all). gelu_precomputed keeps pre, not its output's input.
  std::vector<int> saved_inputs;
  // Per input i (where given): the inputs whose gradients read input i's saved values; a product's operands are
  // each read by the other's gradient alone ({{1}, {0}}; linear's bias by none). A saved input none of whose
  // readers needs a gradient in this backward is not checked against in-place writes since the forward: torch
  // saves it only when a gradient reads it, so an update of a weight between forward and backward is allowed
  // while the activation needs no gradient (the formula reads only its shape). Inputs past the list: every one.
  std::vector<std::vector<int>> saved_input_readers;
  bool save_outputs = false;    // keep outputs for backward
  // With save_outputs: keep only these outputs (empty: all). LayerNorm keeps its statistics, not y.
  std::vector<int> saved_outputs;
  bool is_view = false;         // output 0 aliases input 0's storage
  bool is_inplace = false;      // mutates input 0 and returns it as output 0
  std::vector<int> non_differentiable_outputs;  // e.g. argmax indices, saved statistics
  // Outputs that do not depend on the input values (zeros_like, ones_like): no backward is needed,
  // also inside a create_graph backward (core/autograd/engine.h).
  bool constant_outputs = false;
};

// Registers `def` (name must be new) and returns a reference that stays valid for the process.
const OpDef& RegisterOp(OpDef def);
// nullptr when no op has that name.
const OpDef* FindOp(std::string_view name);
// Like FindOp, but throws kInternal naming the op.
const OpDef& GetOp(std::string_view name);
std::vector<const OpDef*> AllOps();
// The ops among `names` that have no CUDA kernel (GetOp: each name must be registered).
std::set<std::string> OpsWithoutCudaKernel(const std::set<std::string>& names);

// Fills the cuda slot of op `name` from a CUDA kernel library (core/ops/<family>_cuda.cc, linked only
// with a toolkit), whichever of the two registers first in static initialization: the kernel waits
// for RegisterOp if the op is not registered yet. REQUIRES: called during static initialization (before
// any dispatch); a second CUDA kernel for one op is a tessel bug (kInternal).
void SetCudaKernel(std::string_view name, Kernel kernel);

}  // namespace tessel
