// fsdp/fully_shard.cc — FullyShard: validation, managed-parameter discovery, group construction, and the
// FSDPModule methods.
#include "fsdp/fully_shard.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/base/error.h"
#include "dtensor/dtensor_impl.h"
#include "fsdp/param_group.h"
#include "fsdp/state.h"

namespace tessel::fsdp {
namespace {

// A parameter of the module, with every FQN it is registered under (tied tensors have several). For
// fully_shard on a list: `module` is the list's module that registers it first (the FQNs are relative
// to it), `other_owners` the other list modules that register it too.
struct ManagedParam {
  Tensor tensor;
  std::vector<std::string> fqns;
  nn::Module* module = nullptr;
  std::vector<std::pair<nn::Module*, std::string>> other_owners;
};

struct Discovery {
  std::vector<ManagedParam> params;
  std::vector<std::pair<std::string, nn::Module*>> owners;  // submodules that own managed parameters
};

std::string Join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }

// Parameters of `m` and its descendants, stopping at modules already wrapped by FullyShard and skipping
// `ignored` ones (FullyShardOptions::ignored_params); `top` is the module FullyShard was called on (one of
// the list), FQNs are relative to it.
void Discover(nn::Module* m, const std::string& prefix, nn::Module* top,
              const std::unordered_set<const TensorImpl*>& ignored, Discovery* out,
              std::unordered_map<const TensorImpl*, size_t>* index) {
  if (m != top && FsdpState::Of(*m) != nullptr) return;
  bool owns = false;
  for (auto& [name, t] : m->NamedParameters(/*recurse=*/false, /*remove_duplicate=*/false)) {
    if (ignored.contains(t.impl())) continue;
    const std::string fqn = Join(prefix, name);
    auto it = index->find(t.impl());
    if (it == index->end()) {
      index->emplace(t.impl(), out->params.size());
      out->params.push_back({.tensor = t, .fqns = {fqn}, .module = top});
    } else if (ManagedParam& p = out->params[it->second]; p.module == top) {
      p.fqns.push_back(fqn);
    } else {
      p.other_owners.emplace_back(top, fqn);  // tied across the list's modules
    }
    owns = true;
  }
  if (owns) out->owners.emplace_back(prefix, m);
  for (auto& [name, child] : m->NamedChildren()) Discover(child, Join(prefix, name), top, ignored, out, index);
}

// The FSDP parameters of every FullyShard already applied below `m` (to reject tensors shared with them).
using NestedParam = std::pair<std::string, const FsdpParam*>;  // FQN relative to the module being wrapped

void NestedParams(nn::Module* m, const std::string& prefix, bool is_top, std::vector<NestedParam>* out) {
  if (!is_top) {
    if (FsdpState* s = FsdpState::Of(*m); s != nullptr && s->group() != nullptr) {
      for (const FsdpParam* p : s->group()->params()) {
        if (p->module() == m) out->emplace_back(Join(prefix, p->fqns()[0]), p);  // a list's: under its module
      }
    }
  }
  for (auto& [name, child] : m->NamedChildren()) NestedParams(child, Join(prefix, name), false, out);
}

// The mesh of the first DTensor parameter that shares no axis with `mesh` (a TP mesh beside the FSDP one).
std::optional<dtensor::DeviceMesh> DisjointParamMesh(const std::vector<ManagedParam>& params,
                                                     const dtensor::DeviceMesh& mesh) {
  for (const ManagedParam& p : params) {
    const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(p.tensor);
    if (d == nullptr) continue;
    bool shares = false;
    for (const std::string& axis : d->mesh().axis_names()) shares = shares || mesh.topology().FindAxis(axis);
    if (!shares && d->mesh().SharesRootWith(mesh)) return d->mesh();  // else CheckParam names the mismatch
  }
  return std::nullopt;
}

// The joint mesh a nested fully_shard built from `mesh` and a TP mesh (DisjointParamMesh), if any: the root
// of such blocks uses it too, so every group reduces and clips over the same axes.
std::optional<dtensor::DeviceMesh> JointMeshOfNestedGroups(nn::Module& module, const dtensor::DeviceMesh& mesh) {
  for (auto& [fqn, m] : module.NamedModules()) {
    const FsdpState* s = m == &module ? nullptr : FsdpState::Of(*m);
    if (s == nullptr) continue;
    const dtensor::DeviceMesh& nested = s->mesh_info().mesh;
    if (nested.ndim() <= mesh.ndim()) continue;
    bool contains = true;
    for (const std::string& axis : mesh.axis_names()) contains = contains && nested.topology().FindAxis(axis);
    if (contains && nested.Slice(mesh.axis_names()) == mesh) return nested;
  }
  return std::nullopt;
}

void CheckParam(const ManagedParam& p, const nn::Module& module, const dtensor::DeviceMesh& mesh,
                const std::vector<NestedParam>& nested) {
  const std::string& fqn = p.fqns[0];
  const std::string where = Str("fully_shard(", module.type_name(), "): parameter '", fqn, "'");
  for (const auto& [nested_fqn, n] : nested) {
    TESSEL_CHECK(!n->WasBuiltFrom(p.tensor) && !n->sharded_param().is_same(p.tensor), where, " is shared with '",
                 nested_fqn, "', already managed by a nested fully_shard group; wrap the modules that share it ",
                 "with one fully_shard call");
  }
  std::string other_type;
  if (const FsdpParam* other = FsdpParam::FindOwnerOf(p.tensor, &other_type)) {
    for (const auto& [path, inside] : other->module()->NamedModules()) {
      TESSEL_CHECK(inside != &module, where, " is already managed by fully_shard(", other_type,
                   "), applied earlier to a module that contains this one (there as '", other->fqn(),
                   "'): apply fully_shard bottom-up, to each submodule before a module that contains it (the blocks, ",
                   "then the root)");
    }
    TESSEL_FAIL(ErrorCode::kInvalidArgument, where, " is shared with '", other->fqn(), "' of another fully_shard ",
                "group (", other_type, ", not nested in this one): each group would shard its own copy and step it ",
                "with its own module's gradient only, untying them. Wrap a module that contains both with one ",
                "fully_shard call");
  }
  TESSEL_CHECK(p.tensor.dim() >= 1, where, " is a scalar (shape []): FSDP shards dim 0 and needs dim >= 1; keep it ",
               "in a module that is not sharded or give it shape [1]");
  const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(p.tensor);
  const Tensor& local = d != nullptr ? d->local() : p.tensor;
  TESSEL_CHECK(local.is_contiguous(), where, " is not contiguous (shape ", ShapeStr(local.sizes()), ", strides ",
               ShapeStr(local.strides()), "); FSDP copies dim-0 rows and needs contiguous parameters");
  if (d == nullptr) return;
  bool sub_mesh = true;
  for (const std::string& axis : d->mesh().axis_names()) sub_mesh = sub_mesh && mesh.topology().FindAxis(axis);
  if (sub_mesh) sub_mesh = mesh.Slice(d->mesh().axis_names()) == d->mesh();
  TESSEL_CHECK(sub_mesh, where, " is a DTensor on ", d->mesh().ToString(), ", which is not a sub-mesh of the ",
               "fully_shard mesh ", mesh.ToString(), " (parameters on different meshes); pass the whole mesh");
  for (const dtensor::Placement& pl : d->spec().placements()) {
    TESSEL_CHECK(!dtensor::IsPartial(pl), where, " has a Partial placement ",
                 dtensor::PlacementsToString(d->spec().placements()), "; parameters must be Shard or Replicate");
  }
}

// Index of the axis `name` of `mesh`, or kInvalidArgument listing the axes.
int AxisIndex(const dtensor::DeviceMesh& mesh, const std::string& name, const nn::Module& module, const char* what) {
  const auto& names = mesh.axis_names();
  const auto it = std::find(names.begin(), names.end(), name);
  TESSEL_CHECK(it != names.end(), "fully_shard(", module.type_name(), "): ", what, " '", name, "' is not an axis of ",
               mesh.ToString());
  return static_cast<int>(it - names.begin());
}

// The FSDP axes: the ones named in the options, else the mesh axes no parameter uses for tensor
// parallelism (one: FSDP; two: HSDP, only when their names say which replicates and which shards).
FsdpMeshInfo MakeMeshInfo(const std::vector<ManagedParam>& params, const nn::Module& module,
                          const dtensor::DeviceMesh& mesh, const FullyShardOptions& options) {
  const ManagedParam* tp_first = nullptr;
  for (const ManagedParam& p : params) {
    const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(p.tensor);
    if (d == nullptr) continue;
    if (tp_first == nullptr) {
      tp_first = &p;
      continue;
    }
    const dtensor::DTensorImpl* f = dtensor::AsDTensorImpl(tp_first->tensor);
    TESSEL_CHECK(f->mesh() == d->mesh(), "fully_shard(", module.type_name(), "): parameters on different meshes: '",
                 tp_first->fqns[0], "' is on ", f->mesh().ToString(), " and '", p.fqns[0], "' on ",
                 d->mesh().ToString());
  }
  const auto& tp_axes = tp_first ? dtensor::AsDTensorImpl(tp_first->tensor)->mesh().axis_names()
                                 : std::vector<std::string>{};
  const std::string tp_note = tp_first ? Str(" ('", tp_first->fqns[0], "' is on ",
                                             dtensor::AsDTensorImpl(tp_first->tensor)->mesh().ToString(), ")")
                                       : std::string();
  auto check_free = [&](const std::string& name, const char* what) {
    const int a = AxisIndex(mesh, name, module, what);
    TESSEL_CHECK(std::find(tp_axes.begin(), tp_axes.end(), name) == tp_axes.end(), "fully_shard(",
                 module.type_name(), "): ", what, " '", name, "' is used by tensor parallelism", tp_note);
    return a;
  };
  if (options.shard_axis) {
    FsdpMeshInfo info{.mesh = mesh, .shard_axis = check_free(*options.shard_axis, "shard_axis"),
                      .replicate_axis = std::nullopt};
    if (options.replicate_axis) info.replicate_axis = check_free(*options.replicate_axis, "replicate_axis");
    TESSEL_CHECK(info.replicate_axis != info.shard_axis, "fully_shard(", module.type_name(),
                 "): shard_axis and replicate_axis are both '", *options.shard_axis, "'");
    return info;
  }
  if (options.replicate_axis) {  // replicate only (torch's replicate_with_fsdp, DDPMeshInfo)
    FsdpMeshInfo info{.mesh = mesh, .shard_axis = FsdpMeshInfo::kNoShardAxis,
                      .replicate_axis = check_free(*options.replicate_axis, "replicate_axis")};
    const comm::ProcessGroupPtr& group = info.replicate_group();
    info.self_group = group->CachedSubgroup("fully_shard.self", [&] {
      comm::ProcessGroupPtr self = group->NewGroupAmongMembers({group->rank()});
      self->set_name(group->name() + ".self");
      return self;
    });
    return info;
  }
  std::vector<int> free_axes;
  for (int a = 0; a < mesh.ndim(); ++a) {
    const std::string& name = mesh.axis_names()[static_cast<size_t>(a)];
    if (std::find(tp_axes.begin(), tp_axes.end(), name) == tp_axes.end()) free_axes.push_back(a);
  }
  TESSEL_CHECK(free_axes.size() == 1 || free_axes.size() == 2, "fully_shard(", module.type_name(), "): mesh ",
               mesh.ToString(), " leaves ", free_axes.size(), " axes for FSDP after tensor parallelism", tp_note,
               "; need 1 (FSDP) or 2 (HSDP: replicate, shard), or name them in FullyShardOptions");
  FsdpMeshInfo info{.mesh = mesh, .shard_axis = free_axes.back(), .replicate_axis = std::nullopt};
  if (free_axes.size() == 1 || params.empty()) return info;  // no parameters: nothing is sharded either way
  // Two free axes: torch's reading of a 2-D mesh, (replicate, shard) by position, unless the names say that is
  // a mistake: reversed ("dp_shard", "dp_replicate"), or an axis named like another parallelism's ("tp", "cp",
  // ...: a (dp, tp) mesh with no TP parameters once made FSDP shard over "tp" and replicate over "dp",
  // silently). Names that say replicate then shard (torchtitan's "dp_replicate", "dp_shard_cp") always pass.
  const std::string& rep = mesh.axis_names()[static_cast<size_t>(free_axes[0])];
  const std::string& shard = mesh.axis_names()[static_cast<size_t>(free_axes[1])];
  auto says = [](const std::string& name, const char* word) { return name.find(word) != std::string::npos; };
  auto other_parallelism = [](const std::string& name) {
    for (absl::string_view token : absl::StrSplit(name, absl::ByAnyChar("_-."))) {
      for (const char* other : {"tp", "cp", "pp", "ep", "sp", "tensor", "model", "pipeline", "context", "expert",
                                "seq", "sequence"}) {
        if (token == other) return true;
      }
    }
    return false;
  };
  const bool named_in_order = says(rep, "replicate") && says(shard, "shard");
  const bool reversed = !named_in_order && says(rep, "shard") && says(shard, "replicate");
  TESSEL_CHECK(named_in_order || (!reversed && !other_parallelism(rep) && !other_parallelism(shard)),
               "fully_shard(", module.type_name(), "): mesh ", mesh.ToString(), " has two axes no parameter uses ",
               "for tensor parallelism ('", rep, "', '", shard, "'); torch would replicate over '", rep,
               "' and shard over '", shard, "' by position, but ", reversed ? "their names say the opposite"
                                                                           : "one is named like another parallelism",
               ". HINT: shard_axis=\"", shard, "\", replicate_axis=\"", rep, "\" is that HSDP (FullyShardOptions in ",
               "C++, keywords of fully_shard in Python), shard_axis=\"", rep, "\" alone shards over '", rep,
               "' and treats '", shard, "' like a TP axis; or pass the data-parallel submesh, e.g. mesh[\"dp\"]");
  info.replicate_axis = free_axes[0];
  return info;
}

// reshard_after_forward=<int>: this rank's group of `size` consecutive ranks of `shard_group` (PyTorch
// views the FSDP mesh as [-1, size] and uses its last dim). Collective over shard_group the first time:
// every member calls NewGroup once per subgroup, in the same order; the subgroups then stay with
// shard_group (ProcessGroup::CachedSubgroup), so the blocks of one model share them instead of opening a
// set of connections each.
comm::ProcessGroupPtr PostForwardGroup(const comm::ProcessGroupPtr& shard_group, int64_t size) {
  return shard_group->CachedSubgroup(Str("fully_shard.post_forward.", size), [&] {
    comm::ProcessGroupPtr mine;
    for (int64_t first = 0; first < shard_group->size(); first += size) {
      std::vector<int> ranks;
      for (int64_t i = first; i < first + size; ++i) ranks.push_back(static_cast<int>(i));
      if (comm::ProcessGroupPtr g = shard_group->NewGroup(ranks)) mine = std::move(g);
    }
    TESSEL_INTERNAL_ASSERT(mine != nullptr && mine->size() == size, "fully_shard: post-forward subgroup of ",
                           shard_group->name());
    mine->set_name(shard_group->name() + ".post_forward");
    return mine;
  });
}

// FullyShardOptions::reshard_after_forward_size checked against the shard axis (PyTorch's rules) and
// folded into reshard_after_forward; returns the size when a post-forward group is needed (1 < size < W).
std::optional<int64_t> ResolveReshardAfterForward(FullyShardOptions& opts, const FsdpMeshInfo& mesh_info,
                                                  const std::vector<ManagedParam>& params, const nn::Module& module) {
  if (!opts.reshard_after_forward_size) return std::nullopt;
  const int64_t r = *opts.reshard_after_forward_size, w = mesh_info.shard_size();
  TESSEL_CHECK(!opts.reshard_after_forward.has_value(), "fully_shard(", module.type_name(), "): reshard_after_forward ",
               "is set both as a bool and as a size (", r, "); set one");
  TESSEL_CHECK(r >= 1 && r <= w && w % r == 0, "fully_shard(", module.type_name(), "): if passing ",
               "reshard_after_forward as an int, it should be a factor of ", w, " (the size of shard axis '",
               mesh_info.shard_axis_name(), "' of ",
               mesh_info.mesh.ToString(), "), not ", r);
  opts.reshard_after_forward = r > 1;
  if (r == 1 || r == w) return std::nullopt;
  for (const ManagedParam& p : params) {
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !p.tensor.is_distributed(), "fully_shard(", module.type_name(),
                      "): reshard_after_forward=", r, " with tensor-parallel parameters ('", p.fqns[0], "' is a ",
                      "DTensor) is not supported (nor in PyTorch); use true or false");
  }
  return r;
}

// The dim FSDP shards each parameter on (FullyShardOptions::shard_placement_fn, PyTorch's rules), all
// resolved before anything is sharded so a rejected placement leaves the module untouched.
std::vector<int64_t> ResolveShardDims(const FullyShardOptions& opts, const FsdpMeshInfo& mesh_info,
                                      const std::vector<ManagedParam>& params, const nn::Module& module) {
  std::vector<int64_t> dims(params.size(), 0);
  if (!opts.shard_placement_fn) return dims;
  const int64_t w = mesh_info.shard_size();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params[i].tensor;
    const std::optional<dtensor::Shard> placement = opts.shard_placement_fn(t);
    if (!placement) continue;
    const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(t);
    const Shape& local = d != nullptr ? d->local().sizes() : t.sizes();
    const int64_t nd = static_cast<int64_t>(local.size());
    const int64_t dim = placement->dim < 0 ? placement->dim + nd : placement->dim;
    const std::string where = Str("fully_shard(", module.type_name(), "): shard_placement_fn returned ",
                                  placement->ToLongString(), " for parameter '", params[i].fqns[0], "' of shape ",
                                  ShapeStr(t.sizes()));
    TESSEL_CHECK(dim >= 0 && dim < nd, where, ", which has ", nd, " dims");
    const int64_t size = local[static_cast<size_t>(dim)];
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, dim == 0 || size % w == 0, where,
                      ": FSDP does not support uneven sharding on dim ", dim, " (size ", size,
                      d != nullptr ? Str(" of its tensor-parallel local shape ", ShapeStr(local)) : std::string(),
                      ", world size ", w, " of shard axis '",
                      mesh_info.shard_axis_name(),
                      "'); only dim 0 may be uneven, as in PyTorch");
    dims[i] = dim;
  }
  return dims;
}

// The modules of the FSDP states at or below `m`, one per state (a fully_shard list's state is reached
// from each of its modules).
std::vector<nn::Module*> SelectedStates(const FSDPModule& m, bool recurse) {
  std::vector<nn::Module*> out;
  if (!recurse) return {&m.module()};
  std::vector<const FsdpState*> seen;
  for (auto& [fqn, sub] : m.module().NamedModules()) {
    const FsdpState* s = FsdpState::Of(*sub);
    if (s == nullptr || std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    out.push_back(sub);
  }
  return out;
}

}  // namespace

FSDPModule FullyShard(nn::Module& module, const dtensor::DeviceMesh& mesh, const FullyShardOptions& options) {
  return FullyShard(std::vector<nn::Module*>{&module}, mesh, options);
}

FSDPModule FullyShard(const std::vector<nn::Module*>& modules, const dtensor::DeviceMesh& mesh,
                      const FullyShardOptions& options) {
  TESSEL_CHECK(!modules.empty(), "fully_shard: an empty list of modules");
  nn::Module& module = *modules[0];  // names the call in messages; owns the state
  for (size_t i = 0; i < modules.size(); ++i) {
    TESSEL_CHECK(modules[i] != nullptr, "fully_shard: module ", i, " of the list is null");
    if (const FsdpState* existing = FsdpState::Of(*modules[i])) {
      std::string names;
      if (existing->group() != nullptr) {
        for (const FsdpParam* p : existing->group()->params()) names += (names.empty() ? "" : ", ") + p->fqns()[0];
      }
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "fully_shard(", modules[i]->type_name(), "): the module is already ",
                  "wrapped by fully_shard (its parameters: [", names, "]); apply fully_shard once per module");
    }
    for (size_t j = 0; j < modules.size(); ++j) {
      if (i == j) continue;
      for (auto& [fqn, sub] : modules[i]->NamedModules()) {
        TESSEL_CHECK(sub != modules[j], "fully_shard: module ", j, " of the list (", modules[j]->type_name(), ") ",
                     fqn.empty() ? std::string("is listed twice") : Str("is '", fqn, "' inside module ", i, " (",
                     modules[i]->type_name(), ")"), "; list modules that do not contain each other");
      }
    }
  }
  Discovery found;
  std::unordered_map<const TensorImpl*, size_t> index;
  std::unordered_set<const TensorImpl*> ignored;
  for (const Tensor& t : options.ignored_params) {
    TESSEL_CHECK(t.defined(), "fully_shard(", module.type_name(), "): ignored_params holds an undefined tensor");
    ignored.insert(t.impl());
  }
  std::vector<NestedParam> nested;
  for (nn::Module* m : modules) {
    Discover(m, "", m, ignored, &found, &index);
    NestedParams(m, "", true, &nested);
  }
  // PyTorch's 2-D form, fully_shard(module, mesh["dp"]) over parameters that tensor parallelism placed on
  // mesh["tp"] of the same root mesh: FSDP works on the joint mesh and shards over the caller's axes.
  dtensor::DeviceMesh fsdp_mesh = mesh;
  FullyShardOptions opts = options;
  std::optional<dtensor::DeviceMesh> joint;
  if (std::optional<dtensor::DeviceMesh> tp_mesh = DisjointParamMesh(found.params, mesh)) joint = mesh.Join(*tp_mesh);
  for (nn::Module* m : modules) {
    if (!joint) joint = JointMeshOfNestedGroups(*m, mesh);  // a root over such blocks joins their mesh
  }
  if (joint) {
    fsdp_mesh = *joint;
    if (!opts.shard_axis && !opts.replicate_axis && mesh.ndim() <= 2) {
      opts.shard_axis = mesh.axis_names().back();
      if (mesh.ndim() == 2) opts.replicate_axis = mesh.axis_names().front();
    }
  }
  for (const ManagedParam& p : found.params) CheckParam(p, module, fsdp_mesh, nested);
  FsdpMeshInfo mesh_info = MakeMeshInfo(found.params, module, fsdp_mesh, opts);
  if (joint) mesh_info.plain_mesh = mesh;
  const std::optional<int64_t> post_forward_size = ResolveReshardAfterForward(opts, mesh_info, found.params, module);
  const std::vector<int64_t> shard_dims = ResolveShardDims(opts, mesh_info, found.params, module);
  // Used up: the state does not keep the function (nor whatever it captured, e.g. a Python callable).
  opts.shard_placement_fn = nullptr;
  std::unique_ptr<ParamGroup> group;
  if (!found.params.empty()) {
    std::vector<std::unique_ptr<FsdpParam>> params;
    for (size_t i = 0; i < found.params.size(); ++i) {
      ManagedParam& p = found.params[i];
      params.push_back(
          std::make_unique<FsdpParam>(p.module, p.fqns, p.tensor, mesh_info, opts.mp_policy, shard_dims[i]));
      for (auto& [owner, fqn] : p.other_owners) params.back()->AddOwner(owner, fqn);
      p.tensor = Tensor();  // the original (unsharded) parameter is freed unless the caller holds it
    }
    group = std::make_unique<ParamGroup>(std::move(params), mesh_info, module.type_name());
    if (post_forward_size) group->SetPostForwardGroup(PostForwardGroup(mesh_info.shard_group(), *post_forward_size));
  }
  auto state = std::make_unique<FsdpState>(modules, mesh_info, opts, std::move(group), module.type_name());
  FsdpState* raw = state.get();
  raw->RegisterHooks(found.owners);
  module.SetComposableState(FsdpState::kKey, std::move(state));
  for (size_t i = 1; i < modules.size(); ++i) AttachStateAlias(*modules[i], raw);
  return FSDPModule(&module, raw);
}

std::optional<FSDPModule> AsFSDPModule(nn::Module& module) {
  FsdpState* s = FsdpState::Of(module);
  if (s == nullptr) return std::nullopt;
  return FSDPModule(&module, s);
}

void FSDPModule::Unshard(bool async_op) const {
  if (ParamGroup* g = state_->group()) {
    g->Unshard(async_op);
    if (!async_op) g->WaitForUnshard();
  }
}

void FSDPModule::WaitForUnshard() const {
  if (ParamGroup* g = state_->group()) g->WaitForUnshard();
}

void FSDPModule::Reshard() const {
  if (ParamGroup* g = state_->group()) g->Reshard();
}

void FSDPModule::ResetIterState() const { state_->ResetIterState(); }

bool FSDPModule::is_unsharded() const { return state_->group() != nullptr && state_->group()->is_unsharded(); }

void FSDPModule::SetRequiresGradientSync(bool requires_gradient_sync, bool recurse) const {
  for (nn::Module* m : SelectedStates(*this, recurse)) {
    if (ParamGroup* g = FsdpState::Of(*m)->group()) g->requires_gradient_sync = requires_gradient_sync;
  }
}

void FSDPModule::SetRequiresAllReduce(bool requires_all_reduce, bool recurse) const {
  for (nn::Module* m : SelectedStates(*this, recurse)) {
    if (ParamGroup* g = FsdpState::Of(*m)->group()) g->requires_all_reduce = requires_all_reduce;
  }
}

void FSDPModule::ReduceGrad(bool recurse) const {
  std::vector<ParamGroup*> groups;
  for (nn::Module* m : SelectedStates(*this, recurse)) {
    if (ParamGroup* g = FsdpState::Of(*m)->group()) groups.push_back(g);
  }
  for (ParamGroup* g : groups) {
    const bool sync = g->requires_gradient_sync, reshard = g->reshard_after_backward;
    g->requires_gradient_sync = true;
    g->reshard_after_backward = false;
    g->PostBackward();  // no new unsharded gradients: reduces the sync-off buffer, if any
    g->requires_gradient_sync = sync;
    g->reshard_after_backward = reshard;
  }
  for (ParamGroup* g : groups) g->FinalizeBackward();
}

void FsdpState::HoldForSchedule() {
  for (nn::Module* m : SelectedStates(FSDPModule(module_, this), /*recurse=*/true)) {
    FsdpState* s = FsdpState::Of(*m);
    if (s->held_) continue;
    HeldSettings saved{.reshard_after_forward = s->options_.reshard_after_forward,
                       .reshard_after_forward_size = s->options_.reshard_after_forward_size};
    if (ParamGroup* g = s->group()) {
      saved.group_reshard_after_forward = g->reshard_after_forward;
      saved.reshard_after_backward = g->reshard_after_backward;
      saved.requires_gradient_sync = g->requires_gradient_sync;
      saved.post_forward_group = g->post_forward_group();
      g->reshard_after_backward = false;
      g->requires_gradient_sync = false;
    }
    s->held_ = std::move(saved);
    s->set_reshard_after_forward(false);
  }
}

void FsdpState::ReleaseFromSchedule() {
  for (nn::Module* m : SelectedStates(FSDPModule(module_, this), /*recurse=*/true)) {
    FsdpState* s = FsdpState::Of(*m);
    if (!s->held_) continue;
    s->options_.reshard_after_forward = s->held_->reshard_after_forward;
    s->options_.reshard_after_forward_size = s->held_->reshard_after_forward_size;
    if (ParamGroup* g = s->group()) {
      g->reshard_after_forward = s->held_->group_reshard_after_forward;
      g->reshard_after_backward = s->held_->reshard_after_backward;
      g->requires_gradient_sync = s->held_->requires_gradient_sync;
      g->SetPostForwardGroup(s->held_->post_forward_group);
    }
    s->held_.reset();
  }
}

// One group at a time: one all-gather's comm buffer at a time, as planner/ plans the comm ledger.
void FsdpState::UnshardForSchedule() {
  for (nn::Module* m : SelectedStates(FSDPModule(module_, this), /*recurse=*/true)) {
    FSDPModule(m, FsdpState::Of(*m)).Unshard();
  }
}

void FsdpState::ReshardForSchedule() {
  for (nn::Module* m : SelectedStates(FSDPModule(module_, this), /*recurse=*/true)) {
    FSDPModule(m, FsdpState::Of(*m)).Reshard();
  }
}

void FsdpState::ReduceGradForSchedule() { FSDPModule(module_, this).ReduceGrad(/*recurse=*/true); }

void FSDPModule::SetReshardAfterForward(bool reshard_after_forward, bool recurse) const {
  for (nn::Module* m : SelectedStates(*this, recurse)) FsdpState::Of(*m)->set_reshard_after_forward(reshard_after_forward);
}

void FSDPModule::SetReshardAfterBackward(bool reshard_after_backward, bool recurse) const {
  for (nn::Module* m : SelectedStates(*this, recurse)) {
    if (ParamGroup* g = FsdpState::Of(*m)->group()) g->reshard_after_backward = reshard_after_backward;
  }
}

void FSDPModule::SetModulesToForwardPrefetch(const std::vector<FSDPModule>& modules) const {
  std::vector<FsdpState*> states;
  for (const FSDPModule& m : modules) states.push_back(&m.state());
  state_->set_forward_prefetch(std::move(states));
}

void FSDPModule::SetModulesToBackwardPrefetch(const std::vector<FSDPModule>& modules) const {
  std::vector<FsdpState*> states;
  for (const FSDPModule& m : modules) states.push_back(&m.state());
  state_->set_backward_prefetch(std::move(states));
}

void FSDPModule::SetGradientDivideFactor(double factor) const {
  TESSEL_CHECK(factor > 0, "fully_shard: gradient divide factor must be positive, got ", factor);
  if (ParamGroup* g = state_->group()) g->gradient_divide_factor = factor;
}

void FSDPModule::SetForceSumReductionForComms(bool enable) const {
  if (ParamGroup* g = state_->group()) g->force_sum_reduction = enable;
}

void FSDPModule::SetSeparateReduceScatterGroup(bool enable, bool recurse) const {
  for (nn::Module* m : SelectedStates(*this, recurse)) {
    ParamGroup* g = FsdpState::Of(*m)->group();
    if (g == nullptr) continue;
    if (!enable) {
      g->reduce_scatter_group = nullptr;
      continue;
    }
    const comm::ProcessGroupPtr& shard = g->mesh_info().shard_group();
    g->reduce_scatter_group = shard->CachedSubgroup("fully_shard.reduce_scatter", [&] {
      std::vector<int> ranks(static_cast<size_t>(shard->size()));
      std::iota(ranks.begin(), ranks.end(), 0);
      comm::ProcessGroupPtr own = shard->NewGroup(ranks);
      own->set_name(shard->name() + ".reduce_scatter");
      return own;
    });
  }
}

void FSDPModule::SetManualBackwardFinalization(bool enabled) const { state_->SetManualBackwardFinalization(enabled); }
void FSDPModule::FinishPendingBackward() const { state_->FinishPendingBackward(); }
void FSDPModule::WaitForGradientReduction() const { state_->WaitForGradientReduction(); }

void FSDPModule::SetIsLastBackward(bool is_last_backward) const {
  state_->context().is_last_backward = is_last_backward;
}

void FSDPModule::SetUnshardInBackward(bool unshard_in_backward) const {
  if (ParamGroup* g = state_->group()) g->unshard_in_backward = unshard_in_backward;
}

void FSDPModule::ResetShardedParams() const {
  if (ParamGroup* g = state_->group()) g->ResetShardedParams();
}

void FSDPModule::CheckParamsChangeable() const {
  if (const ParamGroup* g = state_->group()) g->CheckParamsChangeable();
}

void FSDPModule::SetAllReduceHook(std::function<void(const Tensor& reduce_output)> hook) const {
  if (ParamGroup* g = state_->group()) g->all_reduce_hook = std::move(hook);
}

void FSDPModule::RecordEventsInto(std::vector<std::string>* log) const { state_->context().event_log = log; }

}  // namespace tessel::fsdp
