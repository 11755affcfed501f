// fsdp/fully_shard.h — FullyShard (PyTorch's fully_shard, FSDP2): per-parameter dim-0 sharding of a
// module's parameters as DTensors, one all-gather / reduce-scatter per call, mixed precision, prefetch,
// HSDP, and FSDP on top of tensor-parallel DTensor parameters. FSDPModule is the handle to the methods
// PyTorch mixes into the module class (unshard, reshard, set_requires_gradient_sync, ...).
//
// Invariant: after FullyShard(m, mesh), every parameter of m not managed by a nested FullyShard is a leaf
// DTensor with the original global shape whose placement on the FSDP shard axis is Shard(0) (torch.chunk
// of dim 0, trailing ranks may be empty), or the Shard(d) FullyShardOptions::shard_placement_fn chose
// (d > 0: even chunks only); optimizers step these. During a module's forward (and its
// backward) the module sees plain unsharded tensors instead, which FSDP all-gathers into and frees.
// .grad of a sharded parameter is a DTensor with the parameter's placements. Parameters named in
// FullyShardOptions::ignored_params stay plain tensors, outside every collective, with local gradients.
//
// Composition order (STYLE 5; PyTorch's "fully_shard should be called bottom-up"):
//   1. pipeline split first (each stage is its own module tree), then per stage:
//   2. tensor parallelism (parallelize_module: parameters become DTensors on the "tp" axis),
//   3. activation checkpointing,
//   4. FullyShard on each block bottom-up (layers.0, layers.1, ...), the root module last.
// FullyShard on a parent after its children is what makes the children's parameters separate groups;
// calling it on a child after its parent, or twice on one module, is an error. Forward must run through
// the root first (it becomes the root and owns the end-of-backward logic).
//
// Meshes: pass the whole mesh the parameters live on, or (PyTorch's 2-D form) the data-parallel sub-mesh
// mesh["dp"] when tensor parallelism placed them on mesh["tp"] of the same root mesh: FSDP then joins the
// two (DeviceMesh::Join) and shards over the axes passed, and a root over such blocks joins the same way. The axes FSDP uses are the ones the user names
// (FullyShardOptions::shard_axis, and replicate_axis for HSDP: gradients are reduce-scattered on the
// shard axis, then all-reduced on the replicate axis; any other axis is treated like a TP axis, where
// plain parameters are replicated). Unnamed, the rule is: the mesh axes the parameters do not already
// use for tensor parallelism; one free axis = FSDP over it; two = HSDP only when their names say which
// is which ("...replicate..." first, "...shard..." second, e.g. dp_replicate, dp_shard), otherwise
// kInvalidArgument asking to name them: a (dp, tp) mesh with no TP parameters is ambiguous, and FSDP
// once sharded it over "tp" silently. FSDP on TP: parameters that are DTensors on mesh["tp"] of a (dp, tp) mesh are
// sharded over "dp" after "tp" (dim 0's shard order [tp, dp]: "TP shard, then FSDP shard of that");
// plain parameters of the same group live on the mesh passed (mesh["dp"], [S(0)]) as torch's fully_shard places
// them: their gradients and optimizer states are DTensors there, one copy per "tp" coordinate. Passed the whole
// mesh (with shard_axis, or torch's dp_mesh_dims), plain parameters are replicated over "tp" ([S(0), R]).
//
// Collectives (asserted with the comm tracer; N blocks each wrapped, plus the root, W >= 2):
//   forward                        N+1 all-gathers (one per group)
//   backward                       N+1 reduce-scatters, and all-gathers: N by default (the root keeps its
//                                  parameters from forward), N+1 when the root reshards after forward
//                                  too, 0 when no group reshards after forward
//   HSDP                           plus one all-reduce on the replicate axis per reduce-scatter (none
//                                  while SetRequiresAllReduce(false): the reduced shards are summed)
//   replicate only                 (replicate_axis without shard_axis: torch's replicate_with_fsdp) no
//                                  all-gather nor reduce-scatter (local copies); one all-reduce on the
//                                  replicate axis per group in backward
//   reshard_after_forward_size r   the backward all-gathers of the groups that keep post-forward pieces
//   (1 < r < shard size)           run on "<shard axis>.post_forward", r consecutive ranks of the shard
//                                  axis (created once per shard group), instead of the shard axis
//   gradient sync off              no reduce-scatter; see below
// Prefetch: the next group's all-gather is issued, async, before the current group computes: in forward
// the group that followed in the previous forward (or the explicit SetModulesToForwardPrefetch list);
// in backward the reverse post-forward order, as PyTorch documents: the root's pre-backward issues
// layers.N-1, whose pre-backward issues layers.N-2 before its own gradients are computed, ...
//
// Post-accumulate-grad hooks (RegisterPostAccumulateGradHook on a sharded parameter, PyTorch's
// register_post_accumulate_grad_hook) run right after a reduction sets that parameter's sharded .grad, during the
// backward (optimizer-in-backward); an unsynchronized backward reduces nothing and runs none.
//
// Gradient accumulation (SetRequiresGradientSync(false)): no collective; each rank adds its unsharded
// gradients into one flat buffer per group laid out like the reduce-scatter input (reduce dtype, grads
// ledger), and the next synced backward adds its own and reduces that buffer in its one reduce-scatter,
// so the result is exact. NOTE: this is unsharded-size storage (like PyTorch): summing rank r's shard
// of every rank's gradient without communication is impossible, so a "sharded" local accumulation can
// only come from reduce-scattering every micro-step — which is what keeping sync on does (.grad, the
// sharded DTensor, accumulates in place across synced backwards).
//
// Memory ledgers: sharded parameters (padded) and the unsharded parameters FSDP materializes are
// "params"; gradients (unsharded ones from autograd, sharded .grad, the sync-off buffer) are "grads";
// the flat all-gather input/output and reduce-scatter input/output staging buffers are "comm".
//
// CUDA parameters (NCCL): copy-in, all-gather and reduce-scatter run on the root's comm streams, ordered
// by events as in PyTorch's FSDP2, with no record_stream and no host wait (fsdp/comm_streams.h; the
// order is tested on the CPU with the fake device backend, the GPU path ran on an H200 on 2026-12-04 in fsdp_cuda_test).
// With every all-gather output alive until the next group's copy-out in forward, forward holds at most
// one extra group's all-gather buffer. CPU parameters keep the host path unchanged.
//
// Example (4 ranks of the threads backend):
//   DeviceMesh mesh = InitDeviceMesh(world, {4}, {"dp"});
//   for (size_t i = 0; i < gpt.layers().size(); ++i) FullyShard(*gpt.layers().at(i), mesh);
//   FSDPModule root = FullyShard(gpt, mesh);
//   optim::AdamW opt(gpt.NamedParameters(), {});       // DTensor shards
//   Tensor loss = gpt.Loss(idx_BT, targets_BT);        // this rank's slice of the global batch
//   Backward(loss);                                    // grads reduce-scattered, averaged over ranks
//   ClipGradNorm(root, 1.0);                           // fsdp/clip_grad_norm.h: one all-reduce
//   opt.Step();
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "dtensor/device_mesh.h"
#include "fsdp/policies.h"

namespace tessel::fsdp {

class FsdpState;

// A cheap, non-owning handle to a module FullyShard was applied to (the module owns the FSDP state).
class FSDPModule {
 public:
  FSDPModule(nn::Module* module, FsdpState* state) : module_(module), state_(state) {}

  nn::Module& module() const { return *module_; }
  FsdpState& state() const { return *state_; }

  // All-gathers this module's parameter group (async_op: only issue it; the next forward or Wait()
  // finishes it) and points the module at the unsharded parameters. No-op when already unsharded.
  void Unshard(bool async_op = false) const;
  // Finishes an Unshard(async_op = true).
  void WaitForUnshard() const;
  // Points the module back at the sharded parameters and frees the unsharded ones.
  void Reshard() const;
  // PyTorch's reset_iter_state (FsdpState::ResetIterState): on the root, after a caught exception.
  void ResetIterState() const;
  bool is_unsharded() const;

  // With false, backward accumulates gradients locally instead of reducing them (see the file comment).
  void SetRequiresGradientSync(bool requires_gradient_sync, bool recurse = true) const;
  // HSDP gradient accumulation with only the reduce-scatter (PyTorch's set_requires_all_reduce): with false,
  // backward reduce-scatters over the shard axis but does not all-reduce over the replicate axis; the
  // reduced shards are summed in a shard-size buffer (grads ledger) and .grad stays as it is. The next
  // backward with true adds that sum in before its all-reduce, so .grad gets exactly the synced result.
  // No effect without a replicate axis.
  void SetRequiresAllReduce(bool requires_all_reduce, bool recurse = true) const;
  // Reduces what backwards accumulated with gradient sync off, now, without another backward: one
  // reduce-scatter per group that has gradients (+ the HSDP all-reduce), finished before returning, into
  // the sharded .grad (PyTorch pipelining's REDUCE_GRAD / perform_reduce_grad). Leaves the sync setting
  // and the unsharded state as they are. A group with nothing accumulated on this rank still joins the
  // reduction (another rank may have accumulated: fsdp/collectives.h's gradient flags) and gives no .grad.
  void ReduceGrad(bool recurse = true) const;
  void SetReshardAfterForward(bool reshard_after_forward, bool recurse = true) const;
  // With false, parameters stay unsharded after backward (saves the next forward's all-gather during
  // gradient accumulation; do not step the optimizer while unsharded).
  void SetReshardAfterBackward(bool reshard_after_backward, bool recurse = true) const;
  // Explicit prefetch targets: their all-gathers are issued in this module's pre-forward / pre-backward
  // (replacing the implicit one-group prefetch of that pass).
  void SetModulesToForwardPrefetch(const std::vector<FSDPModule>& modules) const;
  void SetModulesToBackwardPrefetch(const std::vector<FSDPModule>& modules) const;
  // Gradients are summed over the ranks and divided by `factor` instead of averaged.
  void SetGradientDivideFactor(double factor) const;
  // With true, every gradient reduction sends ReduceOp::kSum and divides afterwards (by the divide factor,
  // else by the number of ranks reduced over) instead of kAvg or a pre-divided kSum (PyTorch's
  // set_force_sum_reduction_for_comms). This module's group only.
  void SetForceSumReductionForComms(bool enable) const;
  // With true, gradients are reduce-scattered on a process group of their own over the same ranks as the
  // shard axis (PyTorch's set_separate_reduce_scatter_group), "<shard group>.reduce_scatter", made once per
  // shard group and shared by every module sharded over it, so a reduce-scatter and the next group's
  // all-gather each run on their group's comm thread instead of one after the other on one. Collective the
  // first time for each shard group (every rank calls it in the same order); call it between iterations.
  // False goes back to the shard group.
  void SetSeparateReduceScatterGroup(bool enable, bool recurse = true) const;
  // With false, backward does not all-gather this module's group, neither in its pre-backward nor as a
  // prefetch target (PyTorch's set_unshard_in_backward): saves an all-gather per backward for modules whose
  // backward reads none of their parameters, e.g. an embedding (its weight's gradient needs only the
  // indices). Gradients are still reduced. A backward that does read one of them fails with
  // kFailedPrecondition (their bytes were freed after forward). This module's group only.
  void SetUnshardInBackward(bool unshard_in_backward) const;
  // torch's FSDPModule._apply after Module.to(dtype) replaced the sharded parameters' data: this module's group
  // takes them as its shards, in their new dtype (ParamGroup::ResetShardedParams). Between iterations.
  void ResetShardedParams() const;
  // Its precondition, checked before Module.to changes anything (ParamGroup::CheckParamsChangeable).
  void CheckParamsChangeable() const;
  // PyTorch's set_is_last_backward (the whole tree's setting; before the first forward, call it on the root):
  // with false, the next backward returns without waiting for its last reduce-scatter, whose gradients
  // reach .grad when a later backward (the first reduction it issues) or a last one finishes it; for
  // microbatches whose reductions may overlap the next one's compute.
  void SetIsLastBackward(bool is_last_backward) const;
  // PyTorch's set_manual_backward_finalization / finalize_backward (FsdpState's, on the root).
  void SetManualBackwardFinalization(bool enabled) const;
  void FinishPendingBackward() const;
  void WaitForGradientReduction() const;
  // Called in every backward that reduces this module's group, with its reduced gradient block: this
  // rank's shard of every parameter in the group's flat layout (padding included), reduce dtype, after the
  // reduce-scatter and the HSDP all-reduce and before the view-out into .grad; changes made in place reach
  // .grad (PyTorch's set_all_reduce_hook: e.g. an all-reduce over a mesh axis FSDP does not know). Not
  // called for a backward that only accumulates (gradient sync or all-reduce off). Null removes it.
  void SetAllReduceHook(std::function<void(const Tensor& reduce_output)> hook) const;
  // Debugging / tests: appends "unshard <fqn>", "reshard <fqn>", "post_backward <fqn>" events of this
  // module's tree (call on the root before its first forward). nullptr stops recording.
  void RecordEventsInto(std::vector<std::string>* log) const;

 private:
  nn::Module* module_;
  FsdpState* state_;
};

// Shards `module`'s parameters (those not managed by a nested FullyShard) over `mesh` in place and
// returns the module's handle. Collective over the mesh: every rank calls it in the same order.
// Errors (kInvalidArgument unless noted), each naming the FQNs: a module wrapped twice; scalar or
// non-contiguous parameters; DTensor parameters not on a sub-mesh of `mesh` or on different meshes; a
// parameter shared with a nested group; no free mesh axis (or more than two) for FSDP. At forward time:
// two roots (kFailedPrecondition), groups on different meshes, and forward on a submodule whose
// parameters were never materialized (unsharded) by its FSDP module (kFailedPrecondition).
FSDPModule FullyShard(nn::Module& module, const dtensor::DeviceMesh& mesh, const FullyShardOptions& options = {});

// PyTorch 2.6's fully_shard([m1, m2, ...]): one parameter group (one all-gather, one reduce-scatter)
// for the parameters of several modules that are not nested in each other, e.g. torchtitan's final norm
// and output projection; weights tied across them are one parameter. The group's all-gather runs when
// the first of them starts its forward and it reshards when all have finished (a module of the list that
// a forward skips keeps the group unsharded until the next forward, as in PyTorch). A root must contain
// them all. The handle returned, and AsFSDPModule of any of them, steer the one group. Errors
// (kInvalidArgument): an empty list, a module listed twice, one inside another, one already wrapped.
FSDPModule FullyShard(const std::vector<nn::Module*>& modules, const dtensor::DeviceMesh& mesh,
                      const FullyShardOptions& options = {});

// The handle of a module FullyShard was applied to, or nullopt.
std::optional<FSDPModule> AsFSDPModule(nn::Module& module);

}  // namespace tessel::fsdp
