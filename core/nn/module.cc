// core/nn/module.cc — Module bookkeeping, state dicts and hook plumbing.
#include "core/nn/module.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_set>
#include <utility>

#include "core/autograd/call.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::nn {
namespace {

// kNotFound for `name` among a module's own parameters or buffers, listing the names it has.
[[noreturn]] void FailNotFound(const std::string& type_name, const char* what, const std::string& name,
                               const std::vector<std::pair<std::string, Tensor>>& have) {
  std::string names;
  for (const auto& [n, t] : have) names += (names.empty() ? "" : ", ") + n;
  TESSEL_FAIL(ErrorCode::kNotFound, type_name, " has no ", what, " '", name, "' (has: ", names, ")");
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() {
  for (auto& [n, t] : params_) {
    if (t.defined()) t.impl()->DropParameterSlot();
  }
}

void Module::RegisterParameter(const std::string& name, Tensor value) {
  TESSEL_CHECK(!HasParam(name), type_name_, ": parameter '", name, "' registered twice");
  TESSEL_CHECK(name.find('.') == std::string::npos, type_name_, ": parameter name '", name, "' contains '.'");
  if (value.defined()) {
    if (!value.is_leaf()) value = Detach(value);
    if (IsFloating(value.dtype())) value.set_requires_grad(true);
    value.impl()->RetagMemory(memory::Ledger::kParams);
    value.impl()->AddParameterSlot();
  }
  params_.emplace_back(name, std::move(value));
}

Tensor Module::RemoveParameter(const std::string& name) {
  auto it = std::find_if(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; });
  if (it == params_.end()) FailNotFound(type_name_, "parameter", name, params_);
  Tensor t = std::move(it->second);
  params_.erase(it);
  if (t.defined()) t.impl()->DropParameterSlot();
  DropParameterHostObject(name);
  return t;
}

std::shared_ptr<void> Module::ParameterHostObject(const std::string& name) const {
  const auto p = std::find_if(params_.begin(), params_.end(), [&](const auto& e) { return e.first == name; });
  if (p == params_.end() || !p->second.defined()) return nullptr;
  for (const auto& [n, host] : param_hosts_) {
    if (n == name && host.impl == p->second.impl()) return host.object;
  }
  return nullptr;
}

void Module::SetParameterHostObject(const std::string& name, std::shared_ptr<void> object) {
  const auto p = std::find_if(params_.begin(), params_.end(), [&](const auto& e) { return e.first == name; });
  if (p == params_.end()) FailNotFound(type_name_, "parameter", name, params_);
  TESSEL_CHECK(p->second.defined(), type_name_, ": parameter '", name, "' is None; it has no object to keep");
  for (auto& [n, host] : param_hosts_) {
    if (n == name && host.impl == p->second.impl()) {
      host.object = std::move(object);
      return;
    }
  }
  param_hosts_.emplace_back(name, HostObject{p->second.impl(), std::move(object)});
}

void Module::DropParameterHostObject(const std::string& name) {
  std::erase_if(param_hosts_, [&](const auto& e) { return e.first == name; });
}

Tensor Module::RemoveBuffer(const std::string& name) {
  auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.first == name; });
  if (it == buffers_.end()) FailNotFound(type_name_, "buffer", name, buffers_);
  Tensor t = std::move(it->second);
  buffers_.erase(it);
  non_persistent_.erase(std::remove(non_persistent_.begin(), non_persistent_.end(), name), non_persistent_.end());
  return t;
}

bool Module::HasComputedParameter(const std::string& name) const {
  return std::any_of(computed_.begin(), computed_.end(), [&](const Computed& c) { return c.name == name; });
}

std::vector<std::string> Module::ComputedParameterNames() const {
  std::vector<std::string> names;
  for (const Computed& c : computed_) names.push_back(c.name);
  return names;
}

void Module::SetComputedParameter(const std::string& name, std::function<Tensor()> compute) {
  auto it = std::find_if(computed_.begin(), computed_.end(), [&](const Computed& c) { return c.name == name; });
  if (!compute) {
    if (it != computed_.end()) computed_.erase(it);
    return;
  }
  const bool child = std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  TESSEL_CHECK(!HasParam(name) && !HasBuffer(name) && !child, type_name_, ": '", name, "' is a parameter, buffer or ",
               "child; remove it before making it a computed parameter");
  if (it != computed_.end()) {
    it->compute = std::move(compute), it->value = Tensor();
  } else {
    computed_.push_back({name, std::move(compute), Tensor()});
  }
}

TensorList Module::RunForward(const TensorList& inputs) {
  if (computed_.empty()) return Forward(inputs);
  ++calls_in_flight_;  // before computing: a compute function may ask InForward()
  struct Done {
    Module* m;
    ~Done() {
      if (--m->calls_in_flight_ == 0) {
        for (Computed& c : m->computed_) c.value = Tensor();
      }
    }
  } done{this};
  for (Computed& c : computed_) c.value = c.compute();
  return Forward(inputs);
}

void Module::RegisterBuffer(const std::string& name, Tensor value, bool persistent) {
  const auto listed = std::find(non_persistent_.begin(), non_persistent_.end(), name);
  for (auto& [n, t] : buffers_) {
    if (n != name) continue;
    // torch: registering an existing buffer's name replaces it where it is (its place in the state dict
    // stays), with the persistence given now. Appending a second entry left lookups on the first.
    t = std::move(value);
    if (persistent && listed != non_persistent_.end()) non_persistent_.erase(listed);
    if (!persistent && listed == non_persistent_.end()) non_persistent_.push_back(name);
    return;
  }
  buffers_.emplace_back(name, std::move(value));
  if (!persistent && listed == non_persistent_.end()) non_persistent_.push_back(name);
}

void Module::AddChild(const std::string& name, std::shared_ptr<Module> child) {
  TESSEL_CHECK(child != nullptr, type_name_, ": RegisterModule('", name, "') with a null module");
  for (const auto& [n, c] : children_) TESSEL_CHECK(n != name, type_name_, ": submodule '", name, "' registered twice");
  CheckNotAncestorOf(*child, name);
  children_.emplace_back(name, std::move(child));
}

void Module::CheckNotAncestorOf(const Module& child, const std::string& name) const {
  // Shared ownership allows any DAG; a cycle would never be freed and would make every walk endless.
  std::vector<const Module*> stack{&child};
  std::unordered_set<const Module*> seen;
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    TESSEL_CHECK(m != this, type_name_, ": cannot register ", child.type_name(), " as '", name, "': ",
                 &child == this ? "a module cannot be its own child" : "the module is an ancestor of " + type_name_);
    for (const auto& [n, c] : m->children_) stack.push_back(c.get());
  }
}

bool Module::HasBuffer(const std::string& name) const {
  return std::any_of(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.first == name; });
}

bool Module::BufferIsPersistent(const std::string& name) const {
  return std::find(non_persistent_.begin(), non_persistent_.end(), name) == non_persistent_.end();
}

bool Module::HasParam(const std::string& name) const {
  return std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& Module::Param(const std::string& name) const {
  for (const auto& [n, t] : params_) {
    if (n == name) return t;
  }
  for (Computed& c : computed_) {
    if (c.name != name) continue;
    if (calls_in_flight_ == 0 || !c.value.defined()) c.value = c.compute();
    return c.value;
  }
  FailNotFound(type_name_, "parameter", name, params_);
}

Tensor Module::OptionalParam(const std::string& name) const {
  const bool exists = HasParam(name) || std::any_of(computed_.begin(), computed_.end(),
                                                    [&](const Computed& c) { return c.name == name; });
  return exists ? Param(name) : Tensor();
}

Module* Module::Submodule(const std::string& fqn) {
  if (fqn.empty()) return this;
  const size_t dot = fqn.find('.');
  const std::string head = fqn.substr(0, dot);
  for (auto& [n, c] : children_) {
    if (n == head) return dot == std::string::npos ? c.get() : c->Submodule(fqn.substr(dot + 1));
  }
  TESSEL_FAIL(ErrorCode::kNotFound, type_name_, ": no submodule '", head, "' (looking up '", fqn, "')");
}

bool Module::HasChild(const std::string& name) const {
  return std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>>::iterator Module::FindChild(const std::string& name) {
  auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  if (it != children_.end()) return it;
  std::string names;
  for (const auto& [n, c] : children_) names += (names.empty() ? "" : ", ") + n;
  TESSEL_FAIL(ErrorCode::kNotFound, type_name_, " has no child '", name, "' (has: ", names, ")");
}

void Module::AnchorChild(const std::string& name, std::shared_ptr<void> anchor) {
  FindChild(name);  // kNotFound unless registered
  DropAnchor(name);
  if (anchor) anchors_.emplace_back(name, std::move(anchor));
}

void Module::DropAnchor(const std::string& name) {
  std::erase_if(anchors_, [&](const auto& a) { return a.first == name; });
}

std::shared_ptr<Module> Module::RemoveChild(const std::string& name) {
  auto it = FindChild(name);
  DropAnchor(name);
  std::shared_ptr<Module> old = std::move(it->second);
  children_.erase(it);
  OnChildChanged(name, old.get(), nullptr);
  return old;
}

std::shared_ptr<Module> Module::ReplaceChild(const std::string& name, std::shared_ptr<Module> child) {
  TESSEL_CHECK(child != nullptr, type_name_, ": ReplaceChild('", name, "') with a null module");
  auto it = FindChild(name);
  CheckNotAncestorOf(*child, name);
  DropAnchor(name);
  std::shared_ptr<Module> old = std::exchange(it->second, std::move(child));
  OnChildChanged(name, old.get(), it->second.get());
  return old;
}

void Module::SetParameter(const std::string& fqn, Tensor value, bool allow_new_shape, bool retire_old) {
  const size_t dot = fqn.rfind('.');
  Module* owner = dot == std::string::npos ? this : Submodule(fqn.substr(0, dot));
  const std::string local = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
  for (auto& [n, t] : owner->params_) {
    if (n != local) continue;
    if (t.defined() && value.defined() && !allow_new_shape) {
      TESSEL_CHECK(t.sizes() == value.sizes(), "SetParameter(", fqn, "): shape ", ShapeStr(value.sizes()),
                   " does not match the current shape ", ShapeStr(t.sizes()));
    }
    const bool same = value.defined() && t.defined() && value.impl() == t.impl();
    if (t.defined() && !same && t.impl()->DropParameterSlot() && retire_old) t.impl()->set_replaced_parameter(true);
    if (value.defined()) {
      if (!same) value.impl()->AddParameterSlot();
      value.impl()->set_replaced_parameter(false);
    }
    if (retire_old) {
      if (!same) owner->DropParameterHostObject(local);
    } else {
      // A toggle between two handles of one parameter (fully_shard's sharded and unsharded): each keeps its
      // object, so the sharded Parameter the user tagged (p.no_weight_decay = True) is the one they get back
      // after a forward; anything else held for this name goes.
      const TensorImpl* keep_old = t.defined() ? t.impl() : nullptr;
      const TensorImpl* keep_new = value.defined() ? value.impl() : nullptr;
      std::erase_if(owner->param_hosts_, [&](const auto& e) {
        return e.first == local && e.second.impl != keep_old && e.second.impl != keep_new;
      });
    }
    t = std::move(value);
    return;
  }
  TESSEL_FAIL(ErrorCode::kNotFound, "SetParameter: no parameter '", fqn, "'");
}

struct Module::Walk {
  bool remove_duplicate;
  std::unordered_set<const Module*> modules;
  std::unordered_set<const TensorImpl*> tensors;
  // Whether `m` is walked (always, unless remove_duplicate and it was reached before).
  bool Enter(const Module* m) { return !remove_duplicate || modules.insert(m).second; }
  bool Keep(const Tensor& t) { return !remove_duplicate || tensors.insert(t.impl()).second; }
};

void Module::CollectNamed(const std::string& prefix, bool recurse, bool buffers, bool persistent_only, Walk* walk,
                          StateDict* out) const {
  const auto& items = buffers ? buffers_ : params_;
  for (const auto& [n, t] : items) {
    if (persistent_only && std::find(non_persistent_.begin(), non_persistent_.end(), n) != non_persistent_.end()) {
      continue;
    }
    if (t.defined() && (walk == nullptr || walk->Keep(t))) out->emplace_back(prefix + n, t);
  }
  if (!recurse) return;
  for (const auto& [n, c] : children_) {
    if (walk == nullptr || walk->Enter(c.get())) {
      c->CollectNamed(prefix + n + ".", true, buffers, persistent_only, walk, out);
    }
  }
}

StateDict Module::NamedParameters(bool recurse, bool remove_duplicate) const {
  StateDict out;
  Walk walk{remove_duplicate};
  walk.Enter(this);
  CollectNamed("", recurse, false, false, &walk, &out);
  return out;
}

StateDict Module::NamedBuffers(bool recurse, bool remove_duplicate) const {
  StateDict out;
  Walk walk{remove_duplicate};
  walk.Enter(this);
  CollectNamed("", recurse, true, false, &walk, &out);
  return out;
}

TensorList Module::Parameters(bool recurse) const {
  TensorList out;
  for (auto& [n, t] : NamedParameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::NamedModules(bool remove_duplicate) {
  std::vector<std::pair<std::string, Module*>> out;
  Walk walk{remove_duplicate};
  std::function<void(Module*, const std::string&)> visit = [&](Module* m, const std::string& path) {
    if (!walk.Enter(m)) return;
    out.emplace_back(path, m);
    for (auto& [n, c] : m->children_) visit(c.get(), path.empty() ? n : path + "." + n);
  };
  visit(this, "");
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::NamedChildren() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [n, c] : children_) out.emplace_back(n, c.get());
  return out;
}

void Module::Train(bool on, bool recurse) {
  training_ = on;
  if (!recurse) return;
  for (auto& [n, c] : children_) c->Train(on);
}

StateDict Module::GetStateDict() const {
  StateDict out;
  // Per module: parameters, then persistent buffers (torch's order), recursing pre-order.
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    // Hooks change how the module holds its tensors (fully_shard reshards), not what the caller owns.
    for (const auto& [id, hook] : m.state_dict_pre_hooks_) hook(const_cast<Module&>(m));
    m.CollectNamed(prefix, false, false, false, nullptr, &out);
    m.CollectNamed(prefix, false, true, true, nullptr, &out);
    for (const auto& [n, c] : m.children_) walk(*c, prefix + n + ".");
  };
  walk(*this, "");
  return out;
}

LoadResult Module::LoadStateDict(const StateDict& state, bool strict) {
  const StateDict own = GetStateDict();
  LoadResult result;
  for (const auto& [k, t] : own) {
    const bool found = std::any_of(state.begin(), state.end(), [&](const auto& s) { return s.first == k; });
    if (!found) result.missing_keys.push_back(k);
  }
  for (const auto& [k, src] : state) {
    auto it = std::find_if(own.begin(), own.end(), [&](const auto& o) { return o.first == k; });
    if (it == own.end()) {
      result.unexpected_keys.push_back(k);
      continue;
    }
    TESSEL_CHECK(it->second.sizes() == src.sizes(), "load_state_dict: size mismatch for ", k,
                 ": copying a tensor with shape ", ShapeStr(src.sizes()),
                 " from the state dict, the shape in the current model is ", ShapeStr(it->second.sizes()));
  }
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "load_state_dict: error(s) in loading state dict for ", type_name_,
                ": missing keys: [", join(result.missing_keys), "]; unexpected keys: [",
                join(result.unexpected_keys), "]");
  }
  NoGradGuard no_grad;
  for (const auto& [k, src] : state) {
    auto it = std::find_if(own.begin(), own.end(), [&](const auto& o) { return o.first == k; });
    if (it != own.end()) CopyInPlace(it->second, src);
  }
  return result;
}

void Module::ZeroGrad() {
  for (auto& [n, p] : NamedParameters()) {
    if (p.grad().defined()) p.set_grad(Tensor());
  }
}

namespace {
template <typename Hook>
int AddHook(std::vector<std::pair<int, Hook>>& hooks, int& next_id, Hook hook, bool prepend) {
  hooks.emplace(prepend ? hooks.begin() : hooks.end(), next_id, std::move(hook));
  return next_id++;
}
}  // namespace

int Module::RegisterForwardPreHook(ForwardPreHook hook, bool prepend) {
  return AddHook(forward_pre_hooks_, next_hook_id_, std::move(hook), prepend);
}
int Module::RegisterForwardHook(ForwardHook hook, bool prepend) {
  return AddHook(forward_hooks_, next_hook_id_, std::move(hook), prepend);
}
int Module::RegisterFullBackwardPreHook(BackwardPreHook hook, bool prepend) {
  return AddHook(backward_pre_hooks_, next_hook_id_, std::move(hook), prepend);
}
int Module::RegisterFullBackwardHook(BackwardHook hook, bool prepend) {
  return AddHook(backward_hooks_, next_hook_id_, std::move(hook), prepend);
}

int Module::RegisterStateDictPreHook(StateDictPreHook hook) {
  state_dict_pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Module::RemoveHook(int id) {
  auto drop = [id](auto& v) { v.erase(std::remove_if(v.begin(), v.end(), [id](auto& p) { return p.first == id; }), v.end()); };
  drop(forward_pre_hooks_);
  drop(forward_hooks_);
  drop(backward_pre_hooks_);
  drop(backward_hooks_);
  drop(state_dict_pre_hooks_);
}

void Module::SetComposableState(const std::string& key, std::unique_ptr<ModuleState> state) {
  auto it = std::find_if(composable_states_.begin(), composable_states_.end(),
                         [&](const auto& s) { return s.first == key; });
  if (it != composable_states_.end()) composable_states_.erase(it);
  if (state) composable_states_.emplace_back(key, std::move(state));
}

ModuleState* Module::GetComposableState(const std::string& key) const {
  for (const auto& [k, s] : composable_states_) {
    if (k == key) return s.get();
  }
  return nullptr;
}

std::vector<ModuleState*> Module::ComposableStates() const {
  std::vector<ModuleState*> out;
  for (const auto& [k, s] : composable_states_) out.push_back(s.get());
  return out;
}

namespace {

// A hook's replacement gradients: one per gradient it was given, each undefined or of the same shape.
TensorList ReplacedGrads(const Module& m, const char* hook, const char* what, const TensorList& before,
                         TensorList after) {
  TESSEL_CHECK(after.size() == before.size(), m.type_name(), ": the ", hook, " returned ", after.size(), " ",
               what, " entries, expected ", before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    TESSEL_CHECK(!after[i].defined() || !before[i].defined() || after[i].sizes() == before[i].sizes(),
                 m.type_name(), ": the ", hook, " returned ", what, " ", i, " of shape ", ShapeStr(after[i].sizes()),
                 ", expected ", ShapeStr(before[i].sizes()));
  }
  return after;
}

}  // namespace

namespace {
struct TensorSpec {
  Shape shape;
  DType dtype;
  Device device;
};
}  // namespace

namespace {

// torch's "Tensor on device meta is not on the expected device cpu!": a module built under the meta device and
// never materialized (to_empty) would compute on values nobody wrote. Meta inputs pass (shape propagation).
void CheckMaterialized(const Module& m, const std::vector<std::pair<std::string, Tensor>>& params,
                       const TensorList& inputs) {
  for (const auto& [name, p] : params) {
    if (!p.defined() || !p.impl()->deferred_init()) continue;
    const bool real_input = std::any_of(inputs.begin(), inputs.end(),
                                        [](const Tensor& t) { return t.defined() && !t.impl()->deferred_init(); });
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !real_input, m.type_name(), ": parameter '", name,
                      "' is on the meta device (built under device(\"meta\") and never materialized) while its input ",
                      "is not; call to_empty(device=\"cpu\") and initialize the parameters (init_weights, ",
                      "reset_parameters) before running the module (torch: Tensor on device meta is not on the ",
                      "expected device cpu!)");
    return;
  }
}

bool AllMeta(const TensorList& inputs) {
  bool any = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    if (!t.impl()->deferred_init()) return false;
    any = true;
  }
  return any;
}

}  // namespace

TensorList Module::Call(TensorList inputs) {
  // Hooks run from copies taken when the call starts (the backward ones: at forward time, as torch's
  // BackwardHook), so a hook may remove itself or register another (torch's one-shot idiom) without
  // invalidating the loop; the backward nodes hold a weak token of this module, so a module destroyed
  // before backward has its hooks skipped instead of called on freed memory.
  const auto pre_hooks = forward_pre_hooks_;
  for (auto& [id, hook] : pre_hooks) hook(*this, inputs);
  CheckMaterialized(*this, params_, inputs);
  // Meta in, meta out (torch's shape inference on a meta model, model(torch.empty(..., device="meta"))): a call
  // whose tensor inputs are all meta allocates its outputs as meta, so the next layer sees a meta input too.
  std::optional<DeferredInitGuard> meta_call;
  if (AllMeta(inputs)) meta_call.emplace(true);
  std::optional<memory::LedgerScope> ledger;
  if (memory::CurrentLedger() == memory::Ledger::kOther) ledger.emplace(memory::Ledger::kActivations);
  const bool backward_hooks = GradModeEnabled() && (!backward_pre_hooks_.empty() || !backward_hooks_.empty());
  // Shared between the two hook nodes of this call: the output gradients, for the backward hook.
  auto grad_outputs = std::make_shared<TensorList>();
  const bool any_input_requires_grad =
      std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
  const std::weak_ptr<const bool> alive = alive_;
  auto bwd_hooks = std::make_shared<const decltype(backward_hooks_)>(backward_hooks_);
  auto bwd_pre_hooks = std::make_shared<const decltype(backward_pre_hooks_)>(backward_pre_hooks_);
  const size_t num_inputs = inputs.size();
  if (backward_hooks && any_input_requires_grad && !bwd_hooks->empty()) {
    // torch's BackwardHookFunction materializes the gradient of a floating input that got none (its outputs were
    // not used, or it does not require grad) as zeros: the hooks see zeros, and the tensors behind an input that
    // requires grad get a zero .grad, not None
    // (a DTensor input keeps None: its zeros would need its placements)
    std::vector<std::optional<TensorSpec>> zero_if_unused;
    for (const Tensor& t : inputs) {
      zero_if_unused.push_back(t.defined() && IsFloating(t.dtype()) && !t.is_distributed()
                                   ? std::optional<TensorSpec>(TensorSpec{t.sizes(), t.dtype(), t.device()})
                                   : std::nullopt);
    }
    inputs = autograd::ApplyBackwardFunction(
        "BackwardHookFunction", inputs, [this, alive, bwd_hooks, grad_outputs, zero_if_unused](const TensorList& g) {
          if (alive.expired()) return g;
          TensorList grad_inputs = g;
          for (size_t i = 0; i < grad_inputs.size() && i < zero_if_unused.size(); ++i) {
            const std::optional<TensorSpec>& spec = zero_if_unused[i];
            if (!grad_inputs[i].defined() && spec) grad_inputs[i] = Zeros(spec->shape, spec->dtype, spec->device);
          }
          for (auto& [id, hook] : *bwd_hooks) {
            if (std::optional<TensorList> r = hook(*this, grad_inputs, *grad_outputs)) {
              grad_inputs = ReplacedGrads(*this, "backward hook", "grad_input", grad_inputs, std::move(*r));
            }
          }
          return grad_inputs;
        });
  }
  TensorList outputs = forward_wrapper_
                           ? forward_wrapper_(inputs, [this](const TensorList& in) { return RunForward(in); })
                           : RunForward(inputs);
  const auto post_hooks = forward_hooks_;
  for (auto& [id, hook] : post_hooks) hook(*this, inputs, outputs);
  if (backward_hooks) {
    outputs = autograd::ApplyBackwardFunction(
        "BackwardPreHookFunction", outputs,
        [this, alive, bwd_hooks, bwd_pre_hooks, grad_outputs, any_input_requires_grad, num_inputs](const TensorList& g) {
          if (alive.expired()) return g;
          TensorList grads = g;
          for (auto& [id, hook] : *bwd_pre_hooks) {
            if (std::optional<TensorList> r = hook(*this, grads)) {
              grads = ReplacedGrads(*this, "backward pre-hook", "grad_output", grads, std::move(*r));
            }
          }
          *grad_outputs = grads;
          if (!any_input_requires_grad) {
            // torch passes one None per input (grad_input == (None,)), not an empty tuple, and refuses
            // a replacement: there is no input gradient to replace.
            for (auto& [id, hook] : *bwd_hooks) {
              const std::optional<TensorList> r = hook(*this, TensorList(num_inputs), grads);
              TESSEL_CHECK(!r || std::none_of(r->begin(), r->end(), [](const Tensor& t) { return t.defined(); }),
                           type_name(), ": a backward hook of a module where no input requires grad must return "
                           "None (or None for every gradient)");
            }
          }
          return grads;
        });
  }
  return outputs;
}

void ModuleList::OnChildChanged(const std::string& name, Module* before, Module* now) {
  auto it = std::find_if(items_.begin(), items_.end(), [&](const auto& item) { return item.first == name; });
  TESSEL_INTERNAL_ASSERT(it != items_.end() && it->second == before,
                         "ModuleList: changed child is not one of its items");
  if (now) {
    it->second = now;
  } else {
    items_.erase(it);
  }
}

TensorList ModuleList::Forward(const TensorList&) {
  TESSEL_FAIL(ErrorCode::kFailedPrecondition, "ModuleList is a container and has no forward; call its items");
}

}  // namespace tessel::nn
