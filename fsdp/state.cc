// fsdp/state.cc — FsdpState: hooks, lazy root initialization, prefetching and the end-of-backward callback.
#include "fsdp/state.h"

#include <algorithm>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/unary.h"

namespace tessel::fsdp {
namespace {

// Casts the floating tensors of `list` to `dtype` (differentiably); others pass through.
void CastFloating(TensorList& list, DType dtype) {
  for (Tensor& t : list) {
    if (t.defined() && IsFloating(t.dtype()) && t.dtype() != dtype) t = Cast(t, dtype);
  }
}

std::string Display(const std::string& fqn) { return fqn.empty() ? "<root>" : fqn; }

// A list module's path before the root's lazy init found it.
const std::string kUnnamed = "\x01";

}  // namespace

FsdpState::FsdpState(std::vector<nn::Module*> modules, FsdpMeshInfo mesh_info, FullyShardOptions options,
                     std::unique_ptr<ParamGroup> group, std::string type_name)
    : module_(modules.at(0)),
      modules_(std::move(modules)),
      module_fqns_(modules_.size(), kUnnamed),
      mesh_info_(std::move(mesh_info)),
      options_(std::move(options)),
      group_(std::move(group)),
      fqn_(std::move(type_name)),
      ctx_(std::make_shared<CommContext>()) {
  ctx_->root = this;
  if (group_) {
    group_->set_context(ctx_.get());
    group_->reshard_after_forward = options_.reshard_after_forward.value_or(true);
  }
}

FsdpState::~FsdpState() = default;

namespace {
// What the later modules of a fully_shard list hold: the first module owns the state.
struct StateAlias final : nn::ModuleState {
  explicit StateAlias(FsdpState* s) : state(s) {}
  FsdpState* state;
};
}  // namespace

FsdpState* FsdpState::Of(const nn::Module& module) {
  if (nn::ModuleState* s = module.GetComposableState(kKey)) return static_cast<FsdpState*>(s);
  if (nn::ModuleState* a = module.GetComposableState(kAliasKey)) return static_cast<StateAlias*>(a)->state;
  return nullptr;
}

void AttachStateAlias(nn::Module& module, FsdpState* state) {
  module.SetComposableState(FsdpState::kAliasKey, std::make_unique<StateAlias>(state));
}

void FsdpState::set_reshard_after_forward(bool value) {
  options_.reshard_after_forward = value;
  options_.reshard_after_forward_size.reset();  // a bool replaces a size (PyTorch's setter)
  if (group_) {
    group_->reshard_after_forward = value;
    group_->SetPostForwardGroup(nullptr);
  }
}

void FsdpState::RegisterHooks(const std::vector<std::pair<std::string, nn::Module*>>& param_owners) {
  const bool list = modules_.size() > 1;
  for (nn::Module* m : modules_) {
    // A list's group: pre-forward when the first of its modules starts, post-forward when every one has
    // finished (recomputation inside backward unshards per call, as for one module). The pre-forward goes
    // before the hooks already registered (PyTorch's prepend=True): a user's pre-hook registered before
    // fully_shard sees the unsharded parameters and the cast inputs.
    m->RegisterForwardPreHook(
        [this, list](nn::Module&, TensorList& inputs) {
          if (list && training_state_ != TrainingState::kPreBackward) {
            if (!to_run_.empty()) return;
            to_run_ = modules_;
          }
          OnPreForward(inputs);
        },
        /*prepend=*/true);
    m->RegisterForwardHook([this, list](nn::Module& self, const TensorList&, TensorList& outputs) {
      if (list && training_state_ != TrainingState::kPreBackward) {
        to_run_.erase(std::remove(to_run_.begin(), to_run_.end(), &self), to_run_.end());
        if (!to_run_.empty()) {
          // Not the group's last module: its backward must find the group unsharded too (when a later
          // module of the list is skipped, the root's end of forward completes the group: EndRootForward).
          outputs = WrapPreBackward(outputs);
          return;
        }
      }
      OnPostForward(outputs);
    });
  }
  if (!group_) return;
  // A state dict taken or loaded while the group is unsharded (the root after a no-grad forward keeps its
  // parameters gathered: no backward follows to reshard them; or after Unshard()) would read the unsharded
  // plain tensors, in the param dtype, and a load would write into buffers the next reshard drops. As in
  // PyTorch (FSDPParamGroup's state-dict pre-hooks), every module owning this group's parameters points
  // back at the sharded ones first. Outside forward and backward only: a state dict taken from a hook
  // inside them sees the parameters as they are.
  for (const auto& [name, owner] : param_owners) {
    owner->RegisterStateDictPreHook([this](nn::Module&) {
      if (training_state_ == TrainingState::kIdle && group_->training_state() != TrainingState::kPostBackward) {
        group_->Reshard();
      }
    });
  }
  for (const auto& [name, owner] : param_owners) {
    if (std::find(modules_.begin(), modules_.end(), owner) != modules_.end()) continue;
    owner->RegisterForwardPreHook([this, name = name](nn::Module& m, TensorList&) {
      if (group_->is_unsharded()) return;
      // After lazy init fqn_ is the FSDP module's path from the root: name the submodule from there.
      const std::string full = is_root_.has_value() && !fqn_.empty() ? fqn_ + "." + name : name;
      std::string params;
      for (const auto& [pname, p] : m.NamedParameters(false)) params += (params.empty() ? "" : ", ") + full + "." + pname;
      TESSEL_FAIL(ErrorCode::kFailedPrecondition, "fully_shard: forward on '", full, "' (", m.type_name(),
                  ") whose parameters [", params, "] were never materialized: they are sharded because their ",
                  "fully_shard module '", Display(fqn_), "' did not run its pre-forward. Call that module (its ",
                  "pre-forward all-gathers them) or Unshard() it first");
    });
  }
}

void FsdpState::LazyInit() {
  if (is_root_.has_value()) return;
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, modules_.size() == 1, "fully_shard: the group of a list of ",
                    modules_.size(), " modules (the first: ", module_->type_name(), ") ran forward before any root: ",
                    "wrap a module containing them all with fully_shard (the root, last) and run forward through it");
  is_root_ = true;
  for (auto& [fqn, m] : module_->NamedModules()) {
    FsdpState* s = Of(*m);
    if (s == nullptr) continue;
    if (std::find(all_states_.begin(), all_states_.end(), s) != all_states_.end()) {
      s->NameModule(m, fqn);  // a later module of a fully_shard list
      continue;
    }
    if (s != this) {
      TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !s->is_root_.has_value(), "fully_shard: two roots: '",
                        Display(fqn), "' (", m->type_name(), ") already ran forward ",
                        s->is_root() ? "as its own root" : "under another root", " before the root module (",
                        module_->type_name(), ") did; run forward through the root module first");
      // A block without tensor-parallel parameters, wrapped with mesh["dp"] under a root that joined mesh["dp"]
      // with its TP mesh, shards over the same "dp" groups (torch's per-block fully_shard of such a block).
      TESSEL_CHECK(s->mesh_info_.mesh == mesh_info_.mesh ||
                       (mesh_info_.plain_mesh && s->mesh_info_.mesh == *mesh_info_.plain_mesh),
                   "fully_shard: parameters on different meshes: '", Display(fqn), "' was sharded on ",
                   s->mesh_info_.mesh.ToString(), " but its root (", module_->type_name(), ") on ",
                   mesh_info_.mesh.ToString());
      s->is_root_ = false;
    }
    s->AdoptIntoRoot(this, fqn);
    s->NameModule(m, fqn);
    all_states_.push_back(s);
  }
  for (FsdpState* s : all_states_) {
    for (size_t i = 0; i < s->modules_.size(); ++i) {
      TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, s->module_fqns_[i] != kUnnamed, "fully_shard: module ",
                        s->modules_[i]->type_name(), " of the list grouped with '", Display(s->fqn_),
                        "' is not inside the root (", module_->type_name(), "): wrap a module containing the ",
                        "whole list with the root's fully_shard");
    }
  }
  // For the root, do not reshard after forward: backward would all-gather it again right away.
  if (group_ && !options_.reshard_after_forward.has_value()) group_->reshard_after_forward = false;
}

void FsdpState::AdoptIntoRoot(FsdpState* root, const std::string& fqn) {
  fqn_ = fqn;
  ctx_ = root->ctx_;
  if (group_) group_->set_context(ctx_.get());
}

void FsdpState::NameModule(nn::Module* m, const std::string& fqn) {
  const size_t i = static_cast<size_t>(std::find(modules_.begin(), modules_.end(), m) - modules_.begin());
  module_fqns_.at(i) = fqn;
  if (!group_) return;
  // A list's group is named by its modules' paths ("norm, output"), as PyTorch's.
  std::string name;
  for (const std::string& f : module_fqns_) {
    if (f != kUnnamed) name += (name.empty() ? "" : ", ") + f;
  }
  group_->set_fqn(modules_.size() == 1 ? fqn : name);
  for (FsdpParam* p : group_->params()) {
    if (p->module() == m) p->set_display_fqn(fqn.empty() ? p->fqns()[0] : fqn + "." + p->fqns()[0]);
  }
}

void FsdpState::OnPreForward(TensorList& inputs) {
  if (training_state_ == TrainingState::kPreBackward && InBackward()) {
    // Recomputation inside backward (activation checkpointing): make sure the parameters are there.
    if (group_) {
      group_->Unshard(false);
      group_->WaitForUnshard();
    }
    return;
  }
  // The previous iteration never finished (an exception escaped its forward or backward, leaving states in
  // forward or pre-backward outside any backward): start clean.
  if (is_root() && !InBackward() &&
      (ctx_->final_callback_queued || ctx_->iter_forward_root != nullptr || training_state_ != TrainingState::kIdle)) {
    ResetIterState();
  }
  training_state_ = TrainingState::kForward;
  LazyInit();
  if (ctx_->iter_forward_root == nullptr) {
    ctx_->iter_forward_root = this;
    // Device tensors: this forward's all-gathers read shards the optimizer wrote on the compute stream.
    if (ctx_->streams) ctx_->streams->AllGatherStreamsWaitForCompute();
  }
  const MixedPrecisionPolicy& mp = options_.mp_policy;
  if (mp.cast_forward_inputs && mp.param_dtype) CastFloating(inputs, *mp.param_dtype);
  if (!group_) {
    ForwardPrefetch();
    return;
  }
  group_->PreForward();
  ctx_->forward_order.push_back(group_.get());
  ParamGroup* group = group_.get();
  inputs = autograd::ApplyBackwardFunction("FsdpPostBackward", inputs, [group](const TensorList& grads) {
    group->PostBackward();
    return grads;
  });
  ForwardPrefetch();
}

void FsdpState::ForwardPrefetch() {
  if (!forward_prefetch_.empty()) {
    for (FsdpState* s : forward_prefetch_) {
      if (s->group_) s->group_->Unshard(/*async_op=*/true);
    }
    return;
  }
  // Implicit: the group that followed this one in the previous forward, if the order still holds.
  if (!group_) return;
  const size_t pos = ctx_->forward_order.size() - 1;
  const std::vector<ParamGroup*>& last = ctx_->last_forward_order;
  if (pos + 1 < last.size() && last[pos] == group_.get()) last[pos + 1]->Unshard(/*async_op=*/true);
}

TensorList FsdpState::WrapPreBackward(const TensorList& outputs) {
  return autograd::ApplyBackwardFunction("FsdpPreBackward", outputs, [this](const TensorList& grads) {
    OnPreBackward();
    return grads;
  });
}

void FsdpState::OnPostForward(TensorList& outputs) {
  if (training_state_ == TrainingState::kPreBackward) return;
  if (group_) group_->PostForward();
  outputs = WrapPreBackward(outputs);
  training_state_ = TrainingState::kIdle;
  if (ctx_->iter_forward_root == this) EndRootForward();
  if (options_.mp_policy.output_dtype) CastFloating(outputs, *options_.mp_policy.output_dtype);
}

void FsdpState::EndRootForward() {
  ctx_->iter_forward_root = nullptr;
  // A fully_shard list whose forward skipped some of its modules (a data-dependent branch) never ran its
  // group's post-forward: complete it here (PyTorch's root does the same), or its next forward would wait
  // for modules that never come and run on sharded parameters.
  for (FsdpState* s : all_states_) {
    if (s->to_run_.empty()) continue;
    s->to_run_.clear();
    if (s->group_) s->group_->PostForward();
    s->training_state_ = TrainingState::kIdle;
  }
  if (ctx_->streams) ctx_->streams->FlushHeldAllGather();  // hold no all-gather buffer past forward
  // Drop prefetches the previous order predicted but this forward never used.
  for (ParamGroup* g : ctx_->last_forward_order) {
    if (g->has_pending_unshard() &&
        std::find(ctx_->forward_order.begin(), ctx_->forward_order.end(), g) == ctx_->forward_order.end()) {
      g->Reshard();
    }
  }
  ctx_->last_forward_order = std::move(ctx_->forward_order);
  ctx_->forward_order.clear();
}

void FsdpState::OnPreBackward() {
  // A create_graph pass would record the gradient's graph on the unsharded parameters, which this pass
  // reshards and frees; the second backward's gradients would then reach no sharded parameter (silently
  // none). PyTorch's FSDP2 does not support it either.
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !CreatingGraph(), "fully_shard: create_graph (higher-order ",
                    "gradients) through '", Display(fqn_), "' is not supported: its parameters are resharded at the ",
                    "end of this backward, so a gradient of the gradient could not reach them. Compute the ",
                    "penalty on a module that fully_shard does not manage, or without create_graph");
  training_state_ = TrainingState::kPreBackward;
  if (!ctx_->final_callback_queued) {
    ctx_->final_callback_queued = true;
    FsdpState* root = ctx_->root;
    QueueCallback([root] { root->RootPostBackwardFinal(); });
  }
  if (group_) group_->PreBackward(/*implicit_prefetch=*/backward_prefetch_.empty());
  for (FsdpState* s : backward_prefetch_) {
    if (s->group_ && s->group_->unshard_in_backward) s->group_->Unshard(/*async_op=*/true);
  }
}

TensorList FsdpState::CallAsForward(TensorList inputs, const std::function<TensorList(const TensorList&)>& method) {
  OnPreForward(inputs);
  TensorList outputs = method(inputs);
  OnPostForward(outputs);
  return outputs;
}

namespace {
void CheckRootOutsideBackward(const std::optional<bool>& is_root, const std::string& fqn, const char* what) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, is_root.value_or(true), what, ": '", Display(fqn),
                    "' is not the root fully_shard module; call it on the root");
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !InBackward(), what, ": called inside a backward pass");
}
}  // namespace

void FsdpState::ResetIterState() {
  CheckRootOutsideBackward(is_root_, fqn_, "reset_iter_state");
  if (!is_root_.has_value()) return;  // before the first forward: nothing has run
  for (FsdpState* s : all_states_) {
    if (s->group_) s->group_->AbortIteration();
    s->training_state_ = TrainingState::kIdle;
    s->to_run_.clear();
  }
  ctx_->iter_forward_root = nullptr;
  ctx_->forward_order.clear();
  ctx_->post_forward_order.clear();
  ctx_->pending_reduce = nullptr;
  ctx_->final_callback_queued = false;
}

void FsdpState::SetManualBackwardFinalization(bool enabled) {
  CheckRootOutsideBackward(is_root_, fqn_, "set_manual_backward_finalization");
  ctx_->manual_finalization = enabled;
}

void FsdpState::FinishPendingBackward() {
  CheckRootOutsideBackward(is_root_, fqn_, "finalize_backward");
  if (!is_root_.has_value()) return;
  // Reverse pre-order: the order backward reaches the groups.
  for (auto it = all_states_.rbegin(); it != all_states_.rend(); ++it) {
    ParamGroup* g = (*it)->group_.get();
    if (g == nullptr) continue;
    if (g->post_backward_pending) {
      g->PostBackward();
    } else if (g->reshard_after_backward) {
      g->Reshard();
    }
  }
}

void FsdpState::WaitForGradientReduction() {
  CheckRootOutsideBackward(is_root_, fqn_, "finalize_backward");
  if (!is_root_.has_value()) return;
  for (FsdpState* s : all_states_) {
    if (s->group_) s->group_->FinalizeBackward();
  }
}

void FsdpState::RootPostBackwardFinal() {
  // Groups whose inputs needed no gradient (the root: token ids) never ran their post-backward node;
  // for a group that took no part in this backward it only reshards.
  const bool manual = ctx_->manual_finalization;
  for (FsdpState* s : all_states_) {
    if (s->group_ && s->group_->training_state() != TrainingState::kPostBackward) {
      if (manual) {
        s->group_->post_backward_pending = true;  // FinishPendingBackward reduces it
      } else {
        s->group_->PostBackward();
      }
    }
  }
  const bool wait = ctx_->is_last_backward && !manual;
  for (FsdpState* s : all_states_) {
    if (s->group_ && wait) s->group_->FinalizeBackward();
    if (s->group_ && !wait) s->group_->EndBackwardInFlight();
    s->training_state_ = TrainingState::kIdle;
    s->to_run_.clear();
  }
  ctx_->post_forward_order.clear();
  ctx_->final_callback_queued = false;
}

}  // namespace tessel::fsdp
