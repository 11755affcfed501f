// core/autograd/checkpoint.h — activation checkpointing: run a function now keeping (almost) nothing
// for backward, and recompute what backward needs when it first needs it.
//
// [Note: activation checkpointing] Non-reentrant, like torch.utils.checkpoint(use_reentrant=False).
// Checkpoint(fn, inputs) runs fn once with grad mode on, so the graph is recorded as usual and connects
// to the inputs and to every parameter fn reads; but under saved-tensor hooks (saved_tensor_hooks.h)
// each tensor a node would save is replaced by its index k in save order, and only the inputs (their
// handles, no copy) are kept. When backward first unpacks some k, the frame reruns fn on the inputs
// (detached, same requires_grad) with grad mode on, collecting what the rerun saves by the same
// indices, and hands out the k-th; each recomputed tensor is dropped from the frame once handed out, so
// the block's working set shrinks as its backward proceeds, exactly as without checkpointing. The
// rerun's own graph is thrown away: gradients flow through the first forward's nodes, the recomputed
// tensors only fill in their saved values. Grad mode is on during the rerun but the engine is not
// re-entered, so hooks that fire during it (fully_shard's pre-forward, which sees its pre-backward
// state and only makes sure the parameters are unsharded) behave as in torch.
//
// Determinism: the rerun must save the same tensors in the same order (checked: kInternal naming the
// counts otherwise), and gives bitwise the same values when fn is a function of its inputs,
// parameters and the Generators listed in CheckpointOptions::generators, whose states are set back to
// their values at the first forward for the rerun and restored afterwards (torch's preserve_rng_state).
//
// Selective (CheckpointOptions::save_outputs): the outputs of the ops the policy names are kept from
// the forward (a handle each, sharing the forward's storage); the rerun takes them from that cache, in
// call order, instead of dispatching those ops, and recomputes everything else. Full checkpointing is
// the null policy.
//
// Invariant: a checkpointed fn gives bitwise the same outputs and gradients as fn itself; memory held
// between forward and backward is the inputs plus, under a selective policy, the kept outputs. An input
// written in place after the forward (`h += checkpoint(f, h)`) would make the rerun compute from the new
// value: the rerun checks each input's version and raises kFailedPrecondition, as torch.
//
// The rerun stops once it has every saved tensor back (CheckpointOptions::early_stop, torch's default): the
// tail of fn after its last saving op does not run again.
//
// A backward with create_graph reruns fn on the inputs themselves and hands out graph-connected tensors, so
// second derivatives through a checkpoint are exact (checkpoint.cc, [Note: higher-order checkpoint]).
//
// Limits: a node whose backward is split (zero-bubble I then W) unpacks twice; the second unpack
// recomputes the region again (correct, slower), and so does a retained graph's next backward; under a
// selective policy those later reruns compute the kept ops again too (the first rerun took their outputs). Nested Checkpoint calls work (each region has its own
// frame; the outer rerun makes a new inner one).
//
// Example:
//   TensorList y = Checkpoint([&](const TensorList& in) { return block.Call(in); }, {x});
//   CheckpointOptions sel{.save_outputs = SaveOutputsOf({"linear", "matmul"})};
//   TensorList z = Checkpoint([&](const TensorList& in) { return block.Call(in); }, {x}, sel);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/dispatch/op.h"
#include "core/tensor/random.h"

namespace tessel::autograd {

// True for the ops whose outputs a selective checkpoint keeps from the forward (the rest recompute), given
// the op's inputs and, in the forward (not in the rerun, which asks before running the op), its outputs.
using CheckpointPolicy = std::function<bool(const OpDef& op, const TensorList& inputs, const TensorList* outputs)>;

// Keeps the outputs of the named ops, e.g. the GEMMs {"linear", "matmul"}.
CheckpointPolicy SaveOutputsOf(std::vector<std::string> op_names);
// Keeps every op's outputs but the named ones': {"scaled_dot_product_attention"} is Korthikanti et
// al.'s selective recompute (planner/'s ActivationCheckpointing::kSelective).
CheckpointPolicy RecomputeOnly(std::vector<std::string> op_names);

struct CheckpointOptions {
  CheckpointPolicy save_outputs;       // null: full checkpointing
  std::vector<Generator*> generators;  // replayed by the recompute; must outlive the backward
  // Selective: a kept output written in place after its op ran (h = linear(x); h.mul_(2)) is an error at the
  // rerun (torch's "mutated" CheckpointError) unless this allows it; the rerun then serves the written value.
  bool allow_cache_entry_mutation = false;
  // torch's early_stop: the rerun stops as soon as every saved tensor is back, so the ops (and module hooks)
  // after the last one that saved a tensor run once, in the forward only. false: fn reruns to its end.
  bool early_stop = true;
  // torch's determinism_check="default": each tensor the rerun saves must have the shape and dtype the forward's
  // had (a rerun that took another branch gave silently wrong gradients); false is torch's "none".
  bool check_metadata = true;
};

using CheckpointFunction = std::function<TensorList(const TensorList& inputs)>;

// True on a thread while a checkpoint's recompute runs (a selective policy's ctx.is_recompute in Python).
bool InCheckpointRecompute();

// Runs fn(inputs) as [Note: activation checkpointing] describes. fn is kept (copied) until the graph
// is freed; whatever it captures must live that long.
TensorList Checkpoint(CheckpointFunction fn, const TensorList& inputs, CheckpointOptions options = {});

}  // namespace tessel::autograd
