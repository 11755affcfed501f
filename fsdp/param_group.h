// fsdp/param_group.h — ParamGroup: the parameters of one FullyShard call, moved together with one
// all-gather and one reduce-scatter; and CommContext, the state all groups under one root share
// (forward / post-forward orders for prefetching, the in-flight reduce-scatter, the event log).
//
// Invariant: a group is either sharded (the module sees Shard(0) DTensors) or unsharded (the module sees
// the unsharded tensors), never a mix; an issued all-gather is either finished by WaitForUnshard or
// waited and dropped by Reshard, so no collective outlives the group's buffers. At most one group of a
// root has a reduce-scatter in flight: a group finishes the previous one before issuing its own.
//
// Lifecycle in one training step (PyTorch's FSDPParamGroup):
//   PreForward:   Unshard (one all-gather, or nothing if a prefetch already issued it), WaitForUnshard
//   PostForward:  Reshard when reshard_after_forward (frees the unsharded bytes); with a post-forward
//                 group (reshard_after_forward=<int>) keep this rank's piece of the full parameters
//   PreBackward:  Unshard + wait again if resharded; then prefetch the group that ran before it in
//                 forward (the reverse post-forward order), so its all-gather overlaps this backward
//   PostBackward: take the unsharded grads; finish the previous group's reduce-scatter (it overlapped this
//                 group's backward); fold the grads into one flat buffer in reduce dtype; Reshard when
//                 reshard_after_backward; issue one reduce-scatter (+ HSDP all-reduce when it finishes)
//                 — or, with gradient sync off, add them into the local accumulation buffer instead
//
// Example:
//   ParamGroup g(std::move(params), mesh_info, "layers.0");
//   g.Unshard(/*async_op=*/true);  ...;  g.WaitForUnshard();   // module computes with full weights
//   g.Reshard();
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/collectives.h"
#include "fsdp/fsdp_param.h"
#include "fsdp/policies.h"

namespace tessel::fsdp {

class ParamGroup;
class FsdpState;

enum class TrainingState { kIdle, kForward, kPreBackward, kPostBackward };

// Shared by every state and group under one root (PyTorch's FSDPCommContext + FSDPStateContext).
struct CommContext {
  FsdpState* root = nullptr;
  FsdpState* iter_forward_root = nullptr;  // the state whose pre-forward started this forward
  bool final_callback_queued = false;
  // PyTorch's set_is_last_backward: false ends a backward without waiting for its last reduce-scatter (it
  // stays in flight into the next backward, which finishes it first), for microbatches.
  bool is_last_backward = true;
  // PyTorch's set_manual_backward_finalization: backward ends without reducing the groups whose post-backward
  // did not run in it, and without waiting; FsdpState::FinishPendingBackward / WaitForGradientReduction do.
  bool manual_finalization = false;
  // Groups in pre-forward order: this forward's, and the previous forward's (implicit forward prefetch).
  std::vector<ParamGroup*> forward_order;
  std::vector<ParamGroup*> last_forward_order;
  // Groups in post-forward order since the last backward, with multiplicity (backward prefetch).
  std::vector<ParamGroup*> post_forward_order;
  ParamGroup* pending_reduce = nullptr;  // the group whose reduce-scatter is in flight
  std::vector<std::string>* event_log = nullptr;
  comm::ProcessGroupPtr norm_group;  // every rank of the mesh (ClipGradNorm), created on first use
  // The comm streams of the root's device (comm_streams.h): created by the first group that moves CUDA
  // tensors; never for CPU tensors, whose path stays host-synchronous.
  std::unique_ptr<CommStreams> streams;
  void Log(const std::string& kind, const std::string& fqn) const;
  // `streams` for a CUDA `device` (created on first use, its streams then wait for the compute
  // stream); nullptr for a CPU device.
  CommStreams* StreamsFor(Device device);
};

class ParamGroup {
 public:
  // REQUIRES: params non-empty. Points the module at the sharded parameters.
  ParamGroup(std::vector<std::unique_ptr<FsdpParam>> params, FsdpMeshInfo mesh_info, std::string fqn);
  ~ParamGroup();
  ParamGroup(const ParamGroup&) = delete;
  ParamGroup& operator=(const ParamGroup&) = delete;

  const std::string& fqn() const { return fqn_; }
  // The label of this group's all-gathers, reduce-scatters and HSDP all-reduces (comm::CollectiveLabel), the same
  // on every rank: "fully_shard 'layers.2'" ('<root>' for the root's own group; the module's type name before the
  // root's lazy init names the groups). A rank whose forward skipped a group then fails at its next collective
  // naming both groups, even when their sizes agree (threads and gloo check; NCCL compares nothing).
  std::string CollectiveName() const;
  void set_fqn(std::string fqn) { fqn_ = std::move(fqn); }
  void set_context(CommContext* ctx) { ctx_ = ctx; }
  const std::vector<FsdpParam*>& params() const { return raw_params_; }
  const FsdpMeshInfo& mesh_info() const { return mesh_info_; }
  // Elements of one rank's block of the flat buffers, and the dtype the all-gather moves.
  int64_t shard_numel() const { return layout_.shard_numel; }
  DType param_dtype() const { return param_dtype_; }
  DType reduce_dtype() const { return reduce_dtype_; }
  bool is_unsharded() const { return unsharded_; }
  // reshard_after_forward=<int> (PyTorch's post-forward mesh): `group` is this rank's group of r
  // consecutive ranks of the shard axis (r divides the axis size W; group rank j = shard rank mod r).
  // PostForward of a forward that builds a graph then keeps, instead of nothing, the piece of the full
  // flat parameters that group rank j owns (blocks [j·W/r, (j+1)·W/r), 1/r of them, params ledger), and
  // the next unshard all-gathers the pieces over `group` instead of the shards over the shard axis. The
  // module sees the sharded parameters meanwhile. Reshard and the end of backward drop the piece (the
  // shards are always current). Null: resharding frees everything (the default).
  // Changing it drops a piece cut for the old group (the shards are current: the next unshard gathers them).
  void SetPostForwardGroup(comm::ProcessGroupPtr group);
  const comm::ProcessGroupPtr& post_forward_group() const { return post_forward_group_; }
  // Whether the group holds a post-forward piece (its next unshard gathers over the post-forward group).
  bool is_sharded_post_forward() const { return post_forward_piece_.defined(); }
  bool has_pending_unshard() const { return pending_unshard_.has_value(); }
  TrainingState training_state() const { return training_state_; }

  // Issues the all-gather (no-op when unsharded or already issued). Every issue is async on the comm
  // thread; `async_op` (PyTorch's name) only documents the caller's intent: a synchronous unshard is
  // Unshard + WaitForUnshard.
  void Unshard(bool async_op);
  // Finishes an issued all-gather: copy-out, module sees the unsharded parameters.
  void WaitForUnshard();
  // Module sees the sharded parameters; unsharded bytes freed; an issued all-gather is waited and dropped.
  void Reshard();

  // torch's FSDPModule._apply tail: every parameter's ResetShardedParam (their data replaced by Module.to),
  // then the group's all-gather and reduce dtypes from theirs. kFailedPrecondition unless the group is idle and
  // resharded with no gradients held back for a later reduction (sync off, HSDP partial sums): between
  // iterations. A post-forward piece is dropped (the shards are current).
  void ResetShardedParams();
  // ResetShardedParams's precondition (the kFailedPrecondition it raises), checked before anything changes.
  void CheckParamsChangeable() const;

  void PreForward();
  void PostForward();
  void PreBackward(bool implicit_prefetch);
  void PostBackward();
  // Waits for this group's in-flight reduce-scatter (if any) and writes the sharded .grads.
  void FinishReduce();
  // End of a backward: finishes the reduce, drops a mistargeted prefetch, clears per-backward records.
  void FinalizeBackward();
  // The end of a backward that is not the last (CommContext::is_last_backward false): FinalizeBackward without
  // finishing this group's reduce-scatter.
  void EndBackwardInFlight();
  // PyTorch's reset_iter_state, after an exception aborted a forward or backward: waits for and drops the
  // in-flight all-gather and reduce-scatter (every rank issued them), discards the gradients held for a
  // later reduction (sync off, HSDP partial sums), reshards, and returns to idle. .grad is left as the
  // completed reductions set it.
  void AbortIteration();

  // Settings (FSDPModule setters).
  bool reshard_after_forward = true;
  bool reshard_after_backward = true;
  bool requires_gradient_sync = true;
  // HSDP: with false, the reduce-scatter runs but not the all-reduce over the replicate axis; its output
  // is summed into partial_reduce_output_ until a backward with true adds it in before its all-reduce.
  bool requires_all_reduce = true;
  std::optional<double> gradient_divide_factor;
  // With false, backward does not all-gather this group (PyTorch's set_unshard_in_backward): for modules
  // whose backward reads none of their parameters (an embedding); a backward that does read one fails
  // with kFailedPrecondition (its bytes were freed after forward, TensorImpl::raw_data).
  bool unshard_in_backward = true;
  // Manual finalization: the post-backward this group still owes (FsdpState::FinishPendingBackward).
  bool post_backward_pending = false;
  // ReduceOp::kSum on the wire for every reduction, the average (or divide factor) applied after it
  // (PyTorch's set_force_sum_reduction_for_comms), instead of kAvg / a pre-divided kSum.
  bool force_sum_reduction = false;
  // The group gradients are reduce-scattered on (FSDPModule::SetSeparateReduceScatterGroup); null: the shard
  // group, shared with the all-gathers.
  comm::ProcessGroupPtr reduce_scatter_group;
  // Called with the group's reduced gradient block (this rank's shard of every parameter, padding
  // included, reduce dtype) after the reduce-scatter and the HSDP all-reduce, before the view-out into
  // .grad; may change it in place (PyTorch's set_all_reduce_hook). Null: none.
  std::function<void(const Tensor&)> all_reduce_hook;

 private:
  void BackwardPrefetch();
  // PostForward with a post-forward group: keeps this rank's piece, then reshards.
  void ReshardPostForward();
  // The module sees the sharded parameters; the unsharded bytes are freed.
  void ToShardedAndFree();
  void AccumulateLocally(const std::vector<Tensor>& grads);
  // The flat reduce-scatter input with every gradient folded in (the sync-off buffer when there is one)
  // and this rank's gradient flags; undefined when there is nothing to reduce. has_grad[i]: parameter i
  // contributes.
  Tensor StageReduceInput(std::vector<Tensor> grads, bool any, std::vector<bool>* has_grad);
  // Writes this rank's flags (1: has_grad[i]) into every rank block of `input`.
  void WriteGradFlags(const Tensor& input, const std::vector<bool>& has_grad) const;
  // Whether the reduction crosses ranks (then the blocks carry [Note: FSDP gradient flags]).
  bool ReducesAcrossRanks() const;
  // One rank's block of the reduce-scatter buffers: the layout's shard_numel plus flag_numel_.
  int64_t reduce_block_numel() const { return layout_.shard_numel + flag_numel_; }
  ReduceSpec MakeReduceSpec();

  std::vector<std::unique_ptr<FsdpParam>> params_;
  std::vector<FsdpParam*> raw_params_;
  FsdpMeshInfo mesh_info_;
  FlatLayout layout_;
  int64_t flag_numel_ = 0;  // GradFlagNumel(params) when ReducesAcrossRanks(), else 0
  DType param_dtype_ = DType::kFloat32;
  DType reduce_dtype_ = DType::kFloat32;
  std::string fqn_;
  CommContext* ctx_ = nullptr;
  TrainingState training_state_ = TrainingState::kIdle;
  bool unsharded_ = false;
  std::optional<AllGatherResult> pending_unshard_;
  comm::ProcessGroupPtr post_forward_group_;
  Tensor post_forward_piece_;  // [W/r · shard_numel], param dtype, while sharded post-forward
  std::optional<ReduceScatterResult> pending_reduce_;
  // Gradient sync off: gradients summed locally in the reduce-scatter layout ([world * block numel],
  // reduce dtype, grads ledger) until the next synced backward reduces them in one collective.
  Tensor accumulated_grads_;
  std::vector<bool> accumulated_has_grad_;
  // requires_all_reduce off (HSDP): the sum of the reduce-scatter outputs not yet all-reduced ([block
  // numel], reduce dtype, grads ledger; its flags summed too).
  Tensor partial_reduce_output_;
  std::vector<size_t> post_forward_indices_;
  // Device tensors: the event behind this group's last view-out into .grad (the compute stream waits
  // for it at the end of backward; PyTorch's _post_reduce_event).
  EventPtr post_reduce_event_;
  // Device tensors: the last reduction's gradient flags, resolved at the end of backward.
  std::optional<DeferredGradFlags> deferred_flags_;
  CommStreams* streams();
  // The group's all-gather and reduce dtypes from its parameters' (one each, else kInvalidArgument).
  void SetDTypesFromParams();
};

}  // namespace tessel::fsdp
