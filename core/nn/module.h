// core/nn/module.h — Module: FQN-named parameters, buffers and submodules, train/eval, state dicts,
// and the four hooks fully_shard needs (forward pre/post, module backward pre/post).
//
// Invariant: a module shares ownership of its children (shared_ptr), so one module may sit in several
// parents or twice in one (torch's `nn.Sequential(*list(net.children())[:-1])`, a layer reused across
// depth) but never inside its own subtree (kInvalidArgument: no ownership cycle); it holds its parameters
// as Tensor handles in registration order. Fully qualified names join the path with dots
// ("layers.0.attn.wq.weight") in the same order PyTorch's named_parameters() yields; as torch's
// remove_duplicate=True, the Named* walks list a module reached twice, and a tensor registered twice,
// once, under its first name, while state dicts keep every name (torch's state_dict). Modules are
// written for plain tensors only: fsdp/ and tp/ swap parameter handles (SetParameter) and attach hooks;
// nothing here knows about DTensor.
//
// Hook semantics follow torch.nn.Module:
//   forward pre-hook  (module, inputs&)               before Forward; may rewrite inputs
//   forward hook      (module, inputs, outputs&)      after Forward; may rewrite outputs
//   backward pre-hook (module, grad_outputs)          when the gradients w.r.t. the outputs are ready
//   backward hook     (module, grad_inputs, grad_outputs)  when the gradients w.r.t. the inputs are ready
//                     (if no input requires grad it fires with empty grad_inputs, like PyTorch)
//
// Example:
//   auto lin = std::make_unique<nn::Linear>(4, 3, /*bias=*/true, gen);
//   Tensor y = (*lin)(x);
//   for (auto& [fqn, p] : lin->NamedParameters()) ...;   // "weight", "bias"
#pragma once

#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel::nn {

class Module;
using ForwardPreHook = std::function<void(Module&, TensorList& inputs)>;
using ForwardHook = std::function<void(Module&, const TensorList& inputs, TensorList& outputs)>;
// Backward hooks may replace the gradients they see (torch's return value): a pre-hook the gradients
// of the outputs the module's backward then uses (and later hooks see), a hook those of the inputs; one
// entry per gradient (undefined: none), else kInvalidArgument. nullopt keeps them.
using BackwardPreHook = std::function<std::optional<TensorList>(Module&, const TensorList& grad_outputs)>;
using BackwardHook =
    std::function<std::optional<TensorList>(Module&, const TensorList& grad_inputs, const TensorList& grad_outputs)>;
// Runs before GetStateDict collects this module's tensors (and so before LoadStateDict copies into them),
// on every module the walk visits (torch's register_state_dict_pre_hook and load pre-hook in one):
// fully_shard points the module back at its sharded parameters here.
using StateDictPreHook = std::function<void(Module&)>;
// Runs in Call in place of Forward (given Forward as `forward`), inside the forward pre-hooks and hooks.
using ForwardFn = std::function<TensorList(const TensorList& inputs)>;
using ForwardWrapper = std::function<TensorList(const TensorList& inputs, const ForwardFn& forward)>;

// State a composable API (fsdp/, tp/) attaches to a module, as PyTorch's _composable_state: owned by the
// module, found by key; nn/ knows nothing of what is inside.
class ModuleState {
 public:
  virtual ~ModuleState() = default;
};

// A composable state whose parameters a pipeline schedule gathers and reduces (fsdp/'s fully_shard and Replicate):
// pipelining/ finds it in each stage's module tree (ComposableStates) and runs the schedule's UNSHARD / RESHARD /
// REDUCE_GRAD actions through it, without including fsdp/ (PyTorch's pipelining asks isinstance(submod,
// FSDPModule)). Each call covers the state's module and every such state below it.
class ScheduledShardingState : public ModuleState {
 public:
  // Before each step of the schedule: the parameters stay gathered from UNSHARD to RESHARD (no reshard after each
  // microbatch's forward or backward) and backward accumulates gradients locally until REDUCE_GRAD. Idempotent.
  virtual void HoldForSchedule() = 0;
  // After a step that reduced the gradients: the settings HoldForSchedule replaced are back (PyTorch's stage
  // turns gradient sync and resharding back on after its reduction), so the module trains on its own again.
  virtual void ReleaseFromSchedule() = 0;
  virtual void UnshardForSchedule() = 0;     // gathered when it returns
  virtual void ReshardForSchedule() = 0;
  virtual void ReduceGradForSchedule() = 0;  // one reduction per group of what backward accumulated
  // Whether this state drives the scheduled-sharding states of its module's submodules too (fully_shard's root
  // covers its nested groups); false (Replicate, which leaves fully_shard'ed submodules to their own states): an
  // executor looks for more below it.
  virtual bool DrivesSubmoduleStates() const { return true; }
};

// FQN → tensor, in registration order.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs hooks around Forward. Use this (or operator()), never Forward directly.
  TensorList Call(TensorList inputs);
  Tensor operator()(const Tensor& x) { return Call({x}).at(0); }
  virtual TensorList Forward(const TensorList& inputs) = 0;

  const std::string& type_name() const { return type_name_; }

  // --- parameters, buffers, children ---
  // Registers a parameter: it becomes a leaf that requires grad, counted in the params ledger.
  void RegisterParameter(const std::string& name, Tensor value);
  void RegisterBuffer(const std::string& name, Tensor value, bool persistent = true);
  template <typename M>
  M* RegisterModule(const std::string& name, std::shared_ptr<M> child) {
    M* raw = child.get();
    AddChild(name, std::move(child));
    return raw;
  }
  template <typename M>
  M* RegisterModule(const std::string& name, std::unique_ptr<M> child) {
    return RegisterModule(name, std::shared_ptr<M>(std::move(child)));
  }
  // This module's own parameter by local name (throws kNotFound listing the names that exist).
  const Tensor& Param(const std::string& name) const;
  // The same, or an undefined tensor when no such parameter (or parametrized value) exists: how a layer reads
  // an optional one, so what was assigned since construction counts (torch's forward reads self.bias), e.g.
  // HF's `decoder = nn.Linear(h, v, bias=False); decoder.bias = self.bias`.
  Tensor OptionalParam(const std::string& name) const;
  bool HasParam(const std::string& name) const;
  bool HasBuffer(const std::string& name) const;  // registered, as None (undefined) included
  bool BufferIsPersistent(const std::string& name) const;  // in the state dict when defined (torch's default)
  // Replaces a parameter handle by FQN (e.g. with a DTensor); shapes may change only through
  // `allow_new_shape` (fsdp/tp own that decision). `retire_old` marks the replaced handle
  // (TensorImpl::replaced_parameter) once no module's slot holds it (a tied weight replaced in one module is
  // still the other's), so an optimizer still holding it raises on Step; fsdp/ passes false
  // when it toggles between the sharded and unsharded handles of one parameter it already owns.
  void SetParameter(const std::string& fqn, Tensor value, bool allow_new_shape = false, bool retire_old = true);
  // Removes this module's own parameter `name` and returns its handle (kNotFound when absent): the first
  // step of turning it into a computed parameter (torch's parametrizations).
  Tensor RemoveParameter(const std::string& name);
  // [Note: parameter host objects] The object a host language keeps for this module's parameter `name` (the
  // Python face's Parameter object), held here so that it lasts as long as the module holds that tensor: torch's
  // modules hold their Parameter objects, and code keys on them (id() maps of param groups, attributes such as
  // `p.no_weight_decay = True`, weakrefs). Null when none was set or the parameter has since become another
  // tensor: SetParameter and RemoveParameter drop it, so a replaced tensor is not kept alive through it. A
  // SetParameter that does not retire the old handle (fully_shard toggling its sharded and unsharded handles)
  // keeps the objects of both, one per tensor, so the sharded one comes back with the sharded tensor.
  std::shared_ptr<void> ParameterHostObject(const std::string& name) const;
  void SetParameterHostObject(const std::string& name, std::shared_ptr<void> object);
  // Removes this module's own buffer `name` (kNotFound when absent) and returns it.
  Tensor RemoveBuffer(const std::string& name);
  // [Note: computed parameters] (torch.nn.utils.parametrize) `name` becomes a tensor that Param(name)
  // returns but that is no parameter (not in NamedParameters or the state dict): `compute` is called at
  // each Call of this module after its forward pre-hooks (so fully_shard has gathered what it reads)
  // and inside the forward wrapper (activation checkpointing recomputes it), its value serves every
  // Param(name) of that forward and is dropped when Forward returns; outside a Call each Param(name)
  // computes it afresh. A null `compute` removes it. REQUIRES: `name` is not a parameter, buffer or
  // child of this module (kInvalidArgument).
  void SetComputedParameter(const std::string& name, std::function<Tensor()> compute);
  bool HasComputedParameter(const std::string& name) const;
  std::vector<std::string> ComputedParameterNames() const;
  // Whether a Call of this module is between its pre-hooks and the end of Forward (computed parameters
  // are being computed or serve that forward): the hook-based spectral_norm iterates only then.
  bool InForward() const { return calls_in_flight_ > 0; }
  // `remove_duplicate` (torch's): a module reached twice is walked once and a tensor registered twice is
  // listed once, under the first name; false lists every name (fsdp/ records all the names of a tensor).
  StateDict NamedParameters(bool recurse = true, bool remove_duplicate = true) const;
  StateDict NamedBuffers(bool recurse = true, bool remove_duplicate = true) const;
  TensorList Parameters(bool recurse = true) const;
  // (fqn, module) for this module ("") and every descendant, pre-order; a module reached twice once, under
  // its first path, unless !remove_duplicate.
  std::vector<std::pair<std::string, Module*>> NamedModules(bool remove_duplicate = true);
  std::vector<std::pair<std::string, Module*>> NamedChildren();
  Module* Submodule(const std::string& fqn);  // "" is this module; throws kNotFound
  bool HasChild(const std::string& name) const;
  // Removes the direct child `name` and returns it (pipeline splitting deletes the modules a stage does
  // not own, like torchtitan's pipeline_module_split). The other children keep their names, so FQNs do
  // not change. Throws kNotFound listing the children.
  std::shared_ptr<Module> RemoveChild(const std::string& name);
  // Puts `child` in the place of the direct child `name` (same name and position); returns the old one.
  std::shared_ptr<Module> ReplaceChild(const std::string& name, std::shared_ptr<Module> child);
  // Keeps `anchor` alive while the child `name` stays registered (released when it is removed or replaced,
  // or with this module). The Python face anchors the object of every child it registers here (a Python
  // child's forward lives on it, and its cycle collector relies on the anchor: bindings/module_gc.h).
  void AnchorChild(const std::string& name, std::shared_ptr<void> anchor);

  // --- modes ---
  void Train(bool on = true, bool recurse = true);  // recurse = false: this module's flag only
  void Eval() { Train(false); }
  bool training() const { return training_; }

  // --- state dicts ---
  // Parameters then persistent buffers, per module, pre-order; each module's state-dict pre-hooks run
  // first (they may swap parameter handles: the state dict reads the module as the hooks leave it).
  StateDict GetStateDict() const;
  // Copies values into the existing tensors (dtype conversion allowed, shapes must match). strict:
  // missing/unexpected keys raise kInvalidArgument listing them; otherwise they are returned.
  LoadResult LoadStateDict(const StateDict& state, bool strict = true);
  void ZeroGrad();  // sets every parameter's .grad to undefined (set_to_none semantics)

  // --- hooks --- (each returns an id usable with RemoveHook). Hooks of a kind run in registration order;
  // `prepend` puts the new one before those already registered (torch's prepend=True).
  int RegisterForwardPreHook(ForwardPreHook hook, bool prepend = false);
  int RegisterForwardHook(ForwardHook hook, bool prepend = false);
  int RegisterFullBackwardPreHook(BackwardPreHook hook, bool prepend = false);
  int RegisterFullBackwardHook(BackwardHook hook, bool prepend = false);
  int RegisterStateDictPreHook(StateDictPreHook hook);
  void RemoveHook(int id);
  // One per module (activation checkpointing, core/nn/checkpoint_wrapper.h); null removes it. Call runs
  // pre-hooks, then wrapper(inputs, Forward), then forward hooks, so hooks of this module (fully_shard's)
  // stay outside the wrapper while those of its children run inside.
  void SetForwardWrapper(ForwardWrapper wrapper) { forward_wrapper_ = std::move(wrapper); }
  bool has_forward_wrapper() const { return forward_wrapper_ != nullptr; }

  // --- composable API state --- (one per key; a null `state` detaches)
  void SetComposableState(const std::string& key, std::unique_ptr<ModuleState> state);
  ModuleState* GetComposableState(const std::string& key) const;  // nullptr when absent
  std::vector<ModuleState*> ComposableStates() const;              // every key's, in attachment order

 protected:
  // Called after the child `name` was removed (`now` null) or replaced (`now` the new module).
  virtual void OnChildChanged(const std::string& /*name*/, Module* /*before*/, Module* /*now*/) {}

 private:
  void AddChild(const std::string& name, std::shared_ptr<Module> child);
  // kInvalidArgument when `child` is this module or has it in its subtree (an ownership cycle).
  void CheckNotAncestorOf(const Module& child, const std::string& name) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>>::iterator FindChild(const std::string& name);
  struct Walk;  // the visited modules and tensors of one remove_duplicate walk
  void CollectNamed(const std::string& prefix, bool recurse, bool buffers, bool persistent_only, Walk* walk,
                    StateDict* out) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  struct HostObject {
    const TensorImpl* impl;  // the parameter tensor it stands for
    std::shared_ptr<void> object;
  };
  std::vector<std::pair<std::string, HostObject>> param_hosts_;  // [Note: parameter host objects]
  void DropParameterHostObject(const std::string& name);
  struct Computed {
    std::string name;
    std::function<Tensor()> compute;
    Tensor value;  // this Call's value (or the last computed outside one)
  };
  mutable std::vector<Computed> computed_;
  int calls_in_flight_ = 0;  // Forward calls of this module running (computed values are current)
  TensorList RunForward(const TensorList& inputs);
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::string> non_persistent_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<std::string, std::shared_ptr<void>>> anchors_;  // by child name (AnchorChild)
  void DropAnchor(const std::string& name);
  std::vector<std::pair<int, ForwardPreHook>> forward_pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> forward_hooks_;
  std::vector<std::pair<int, BackwardPreHook>> backward_pre_hooks_;
  std::vector<std::pair<int, BackwardHook>> backward_hooks_;
  // Expires with this module: backward nodes of its hooks test it (Call) and skip the hooks of a module
  // destroyed before backward ran.
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);
  std::vector<std::pair<int, StateDictPreHook>> state_dict_pre_hooks_;
  int next_hook_id_ = 0;
  ForwardWrapper forward_wrapper_;
  // Last member: destroyed first, while the hooks and children it may refer to still exist.
  std::vector<std::pair<std::string, std::unique_ptr<ModuleState>>> composable_states_;
};

// A list of modules named "0", "1", ... in append order (torch.nn.ModuleList). Removing an item keeps the
// others' names (a pipeline stage owning layers 2 and 3 holds "2" and "3", like torchtitan's ModuleDict of
// layers); at(i) and size() count the items present, in order.
class ModuleList final : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  M* Append(std::shared_ptr<M> m) {
    M* raw = m.get();
    std::string name = std::to_string(next_index_);
    RegisterModule(name, std::move(m));  // may throw (a cycle): the index is taken only once it holds
    ++next_index_;
    items_.emplace_back(std::move(name), raw);
    return raw;
  }
  template <typename M>
  M* Append(std::unique_ptr<M> m) {
    return Append(std::shared_ptr<M>(std::move(m)));
  }
  Module* at(size_t i) const { return items_.at(i).second; }
  size_t size() const { return items_.size(); }
  TensorList Forward(const TensorList& inputs) override;  // error: ModuleList is not callable

 protected:
  void OnChildChanged(const std::string& name, Module* before, Module* now) override;

 private:
  std::vector<std::pair<std::string, Module*>> items_;  // (name, module): one module may be listed twice
  size_t next_index_ = 0;
};

}  // namespace tessel::nn
