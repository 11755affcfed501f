// fsdp/state.h — FsdpState: what one FullyShard call attaches to its module (nn::ModuleState): the
// parameter group, the module hooks that drive it, and, for the root, lazy initialization and the
// end-of-backward callback (PyTorch's FSDPState).
//
// Invariant: the root is the first FSDP module to run forward; at that moment it collects every FSDP
// state below it (pre-order), makes them share its CommContext, and no state below it may already be a
// root. Hooks reference the state by raw pointer: the module owns both, so they live and die together.
//
// Hook wiring per forward (what makes the collective counts of fully_shard.h exact):
//   forward pre-hook   lazy init (root), cast inputs (mp), group PreForward (all-gather), wrap the
//                      inputs in a "post-backward" autograd function, forward prefetch
//   forward hook       group PostForward (reshard), wrap the outputs in a "pre-backward" autograd
//                      function, cast outputs (mp); the root's ends the forward (prefetch bookkeeping)
//   pre-backward       queue the root's end-of-backward callback once, group PreBackward (+ prefetch)
//   post-backward      group PostBackward (reduce-scatter) once the inputs' gradients are computed
//   end of backward    post-backward for groups whose inputs needed no gradient (the root), then wait
//                      for the last reduce-scatter and reset every state
//
// fully_shard on a list of modules (one group for several modules, PyTorch 2.6): the state is owned by
// the first module and the others hold an alias to it (FsdpState::Of finds it from any of them). The
// group's pre-forward runs when the first of its modules starts a forward, its post-forward when all of
// them have finished (PyTorch's group forward hooks), so one all-gather and one reduce-scatter serve them
// all. Such a state is never the root.
//
// Example:
//   FsdpState* s = FsdpState::Of(module);     // nullptr when FullyShard was not applied
//   s->group()->Unshard(/*async_op=*/false);
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "fsdp/param_group.h"
#include "fsdp/policies.h"

namespace tessel::fsdp {

class FsdpState final : public nn::ScheduledShardingState {
 public:
  static constexpr const char* kKey = "fully_shard";

  static constexpr const char* kAliasKey = "fully_shard.list";

  // `group` may be null (a module whose parameters are all managed by nested FullyShard calls).
  // `modules`: what FullyShard was called on, one module or a list (the first owns the state).
  FsdpState(std::vector<nn::Module*> modules, FsdpMeshInfo mesh_info, FullyShardOptions options,
            std::unique_ptr<ParamGroup> group, std::string type_name);
  ~FsdpState() override;

  // The state of `module`, also when it is a later module of a fully_shard list; nullptr when none.
  static FsdpState* Of(const nn::Module& module);

  nn::Module* module() const { return module_; }
  const std::vector<nn::Module*>& modules() const { return modules_; }
  ParamGroup* group() const { return group_.get(); }
  const FsdpMeshInfo& mesh_info() const { return mesh_info_; }
  const FullyShardOptions& options() const { return options_; }
  const std::string& fqn() const { return fqn_; }
  CommContext& context() { return *ctx_; }
  bool is_root() const { return is_root_.value_or(false); }

  // Attaches the forward hooks to the module, and to every submodule that owns parameters of this
  // group a check that they were unsharded (materialized) before it runs.
  void RegisterHooks(const std::vector<std::pair<std::string, nn::Module*>>& param_owners);

  void set_forward_prefetch(std::vector<FsdpState*> states) { forward_prefetch_ = std::move(states); }
  void set_backward_prefetch(std::vector<FsdpState*> states) { backward_prefetch_ = std::move(states); }
  void set_reshard_after_forward(bool value);

  // nn::ScheduledShardingState (a pipeline schedule's UNSHARD / RESHARD / REDUCE_GRAD, pipelining/executor.h),
  // over this state and every state below its module: HoldForSchedule turns reshard after forward and after
  // backward and gradient sync off (as FSDPModule's setters with recurse), ReleaseFromSchedule puts back what each
  // state had; the others are FSDPModule's Unshard (group by group, each waited for), Reshard and ReduceGrad.
  void HoldForSchedule() override;
  void ReleaseFromSchedule() override;
  void UnshardForSchedule() override;
  void ReshardForSchedule() override;
  void ReduceGradForSchedule() override;

  // PyTorch's reset_iter_state, on the root: after an exception aborted a forward or backward, every
  // group waits for and drops its in-flight collectives (the failed iteration's pending gradient
  // reductions are lost, as are gradients held for a later reduction), reshards, and the iteration state
  // (forward root, orders, the queued end-of-backward) is cleared. A no-op before the first forward.
  // The root's next forward does the same by itself when the previous iteration was left unfinished (a
  // forward that never reached its end, a backward whose end-of-backward callback never ran), so a caught
  // exception does not desynchronize the ranks' collectives. kFailedPrecondition on a non-root state.
  void ResetIterState();

  // PyTorch's manual backward finalization, on the root. SetManualBackwardFinalization(true) before a
  // backward: its end reduces nothing it did not reduce on the way and waits for nothing; then
  // FinishPendingBackward() runs the owed post-backwards (reduce-scatters) and reshards, and
  // WaitForGradientReduction() waits for every reduction and sets .grad (finalize_backward is both; with
  // async_op the second is the handle's wait). A no-op before the first forward; kFailedPrecondition on a
  // non-root state or inside a backward.
  void SetManualBackwardFinalization(bool enabled);
  void FinishPendingBackward();
  void WaitForGradientReduction();

  // PyTorch's register_fsdp_forward_method: runs `method` (a forward under another name, e.g. a loss or
  // generate method that does not call forward) between this state's pre-forward (lazy init, all-gather,
  // input cast, post-backward wrapping) and post-forward (reshard, pre-backward wrapping, output cast), as
  // the module hooks do around Forward. For a fully_shard list the whole group's pre- and post-forward run.
  TensorList CallAsForward(TensorList inputs, const std::function<TensorList(const TensorList&)>& method);

 private:
  void OnPreForward(TensorList& inputs);
  void OnPostForward(TensorList& outputs);
  // `outputs` with a node whose backward runs OnPreBackward (the group unsharded for the gradients).
  TensorList WrapPreBackward(const TensorList& outputs);
  void OnPreBackward();
  void LazyInit();
  void AdoptIntoRoot(FsdpState* root, const std::string& fqn);
  // Names the parameters `m` (one of modules_) registers after its path from the root.
  void NameModule(nn::Module* m, const std::string& fqn);
  void ForwardPrefetch();
  void EndRootForward();
  void RootPostBackwardFinal();

  nn::Module* module_;
  std::vector<nn::Module*> modules_;        // module_ first
  std::vector<nn::Module*> to_run_;         // list: this forward's modules not yet finished
  std::vector<std::string> module_fqns_;    // per module, from the root (set by lazy init)
  FsdpMeshInfo mesh_info_;
  FullyShardOptions options_;
  std::unique_ptr<ParamGroup> group_;
  std::string fqn_;  // relative to the root once lazily initialized; the type name before
  std::optional<bool> is_root_;
  std::shared_ptr<CommContext> ctx_;  // shared by every state under one root (sharing is the point)
  std::vector<FsdpState*> all_states_;  // root only: every state of the tree, pre-order, itself first
  std::vector<FsdpState*> forward_prefetch_;
  std::vector<FsdpState*> backward_prefetch_;
  TrainingState training_state_ = TrainingState::kIdle;
  // This state's settings before a pipeline schedule held it (HoldForSchedule), restored on release.
  struct HeldSettings {
    std::optional<bool> reshard_after_forward;
    std::optional<int64_t> reshard_after_forward_size;
    bool group_reshard_after_forward = true, reshard_after_backward = true, requires_gradient_sync = true;
    comm::ProcessGroupPtr post_forward_group;
  };
  std::optional<HeldSettings> held_;
};

// Makes `module` (a later module of a fully_shard list) find `state` through FsdpState::Of.
void AttachStateAlias(nn::Module& module, FsdpState* state);

}  // namespace tessel::fsdp
