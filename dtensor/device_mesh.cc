// dtensor/device_mesh.cc — mesh construction (one group per axis), sub-meshes and flattening.
#include "dtensor/device_mesh.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "core/base/error.h"
#include "core/tensor/shape.h"

namespace tessel::dtensor {
namespace {

// Creates, through `root`, one group per entry of root_topology.GroupsOver(axes) (the same sequence on
// every rank, as NewGroup requires) and returns the one that contains the calling rank.
comm::ProcessGroupPtr CreateGroups(const comm::ProcessGroupPtr& root, const MeshTopology& root_topology,
                                   std::span<const int> axes, const std::string& name) {
  const std::vector<int>& members = root->global_ranks();
  comm::ProcessGroupPtr mine;
  for (const std::vector<int>& global : root_topology.GroupsOver(axes)) {
    std::vector<int> group_ranks;
    for (int g : global) {
      auto it = std::find(members.begin(), members.end(), g);
      TESSEL_INTERNAL_ASSERT(it != members.end(), "DeviceMesh: rank ", g, " is not in the root group");
      group_ranks.push_back(static_cast<int>(it - members.begin()));
    }
    comm::ProcessGroupPtr g = root->NewGroup(group_ranks);
    if (g != nullptr) {
      g->set_name(name);
      mine = std::move(g);
    }
  }
  TESSEL_INTERNAL_ASSERT(mine != nullptr, "DeviceMesh: rank ", root->global_ranks()[root->rank()],
                         " is in no group named '", name, "'");
  return mine;
}

// InitDeviceMesh over `ranks`, fewer than the world's: its members over a group of their own, others NonMember.
DeviceMesh MeshOverSomeRanks(const comm::ProcessGroupPtr& world, std::vector<int64_t> shape,
                             std::vector<std::string> axis_names, std::vector<int> ranks) {
  const std::vector<int>& world_ranks = world->global_ranks();
  std::vector<int> group_ranks;  // world group ranks of the mesh, ascending
  for (int r : ranks) {
    auto it = std::find(world_ranks.begin(), world_ranks.end(), r);
    TESSEL_CHECK(it != world_ranks.end(), "DeviceMesh: rank ", r, " of the mesh ", ShapeStr(std::vector<int64_t>(
                     ranks.begin(), ranks.end())), " is not in the world group '", world->name(), "' of ",
                 world->size(), " ranks");
    group_ranks.push_back(static_cast<int>(it - world_ranks.begin()));
  }
  std::sort(group_ranks.begin(), group_ranks.end());
  TESSEL_CHECK(std::adjacent_find(group_ranks.begin(), group_ranks.end()) == group_ranks.end(), "DeviceMesh: the ",
               "mesh ", ShapeStr(std::vector<int64_t>(ranks.begin(), ranks.end())), " names a rank twice");
  auto topology = std::make_shared<const MeshTopology>(shape, axis_names, ranks);  // validates names and shape
  const int me = world_ranks[static_cast<size_t>(world->rank())];
  if (!topology->CoordinateOf(me).has_value()) return DeviceMesh::NonMember(std::move(topology), me);
  comm::ProcessGroupPtr members = world->NewGroupAmongMembers(group_ranks);
  return InitDeviceMesh(members, std::move(shape), std::move(axis_names), std::move(ranks));
}

std::vector<std::string> ToStrings(std::initializer_list<std::string_view> names) {
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace

DeviceMesh::DeviceMesh(std::shared_ptr<const MeshTopology> topology, int global_rank,
                       std::vector<comm::ProcessGroupPtr> axis_groups, comm::ProcessGroupPtr root,
                       std::shared_ptr<const MeshTopology> root_topology,
                       std::shared_ptr<FlattenedAxes> flattened)
    : topology_(std::move(topology)),
      global_rank_(global_rank),
      axis_groups_(std::move(axis_groups)),
      root_(std::move(root)),
      root_topology_(std::move(root_topology)),
      flattened_(flattened != nullptr ? std::move(flattened) : std::make_shared<FlattenedAxes>()) {
  std::optional<std::vector<int64_t>> coord = topology_->CoordinateOf(global_rank_);
  if (axis_groups_.empty()) {  // NonMember
    TESSEL_INTERNAL_ASSERT(!coord.has_value(), "DeviceMesh: no groups for rank ", global_rank_, " of ",
                           topology_->ToString());
    return;
  }
  TESSEL_INTERNAL_ASSERT(coord.has_value(), "DeviceMesh: rank ", global_rank_, " is not in ", topology_->ToString());
  coordinate_ = std::move(*coord);
  TESSEL_INTERNAL_ASSERT(static_cast<int>(axis_groups_.size()) == topology_->ndim(), "DeviceMesh: ",
                         axis_groups_.size(), " groups for ", topology_->ToString());
}

DeviceMesh DeviceMesh::NonMember(std::shared_ptr<const MeshTopology> topology, int global_rank) {
  std::shared_ptr<const MeshTopology> root = topology;
  return DeviceMesh(std::move(topology), global_rank, {}, nullptr, std::move(root));
}

void DeviceMesh::CheckMember(std::string_view op) const {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, is_member(), op, ": rank ", global_rank_, " is not part of ",
                    ToString(), ", a mesh over some of the world's ranks; only its ranks can use its groups or ",
                    "place tensors on it (torch's non-participating ranks hold empty shards; tessel's do not: ",
                    "call it on the mesh's ranks only)");
}

const std::vector<int64_t>& DeviceMesh::coordinate() const {
  CheckMember("DeviceMesh::coordinate");
  return coordinate_;
}

int64_t DeviceMesh::local_rank(int axis) const {
  CheckMember("DeviceMesh::local_rank");
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, axis >= 0 && axis < ndim(), "DeviceMesh::local_rank: axis ", axis,
                    " out of range for ", topology_->ShortString());
  return coordinate_[static_cast<size_t>(axis)];
}

const comm::ProcessGroupPtr& DeviceMesh::axis_group(int axis) const {
  CheckMember("DeviceMesh::axis_group");
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, axis >= 0 && axis < ndim(), "DeviceMesh::axis_group: axis ", axis,
                    " out of range for ", topology_->ShortString());
  return axis_groups_[static_cast<size_t>(axis)];
}

DeviceMesh DeviceMesh::operator[](std::string_view axis) const {
  return Slice(std::vector<std::string>{std::string(axis)});
}

DeviceMesh DeviceMesh::operator[](std::initializer_list<std::string_view> axes) const { return Slice(ToStrings(axes)); }

DeviceMesh DeviceMesh::Slice(std::span<const std::string> axes) const {
  CheckMember("DeviceMesh: slicing");
  const bool all_own = std::all_of(axes.begin(), axes.end(),
                                   [&](const std::string& a) { return topology_->FindAxis(a).has_value(); });
  if (!all_own && (topology_ == root_topology_ || *topology_ == *root_topology_)) return SliceWithFlattened(axes);
  const std::vector<int> idx = topology_->AxesOf(axes);
  std::vector<comm::ProcessGroupPtr> groups;
  for (int a : idx) groups.push_back(axis_groups_[static_cast<size_t>(a)]);
  auto sub = std::make_shared<const MeshTopology>(topology_->Slice(idx, coordinate_));
  return DeviceMesh(std::move(sub), global_rank_, std::move(groups), root_, root_topology_, flattened_);
}

const FlattenedAxes::Entry* DeviceMesh::FlattenedLocked(std::string_view name) const {
  for (const FlattenedAxes::Entry& e : flattened_->entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<std::vector<int>> DeviceMesh::RootAxesOf(std::span<const std::string> names, std::string_view op) const {
  std::vector<std::vector<int>> per_name;
  std::vector<int> all;
  {
    std::lock_guard<std::mutex> lock(flattened_->mu);
    for (const std::string& name : names) {
      std::vector<int> axes;
      if (const std::optional<int> a = root_topology_->FindAxis(name)) {
        axes = {*a};
      } else {
        const FlattenedAxes::Entry* e = FlattenedLocked(name);
        TESSEL_CHECK(e != nullptr, op, ": axis '", name, "' is neither an axis of the root mesh ",
                     root_topology_->ToString(), " nor flattened from it on this rank");
        axes = e->root_axes;
      }
      all.insert(all.end(), axes.begin(), axes.end());
      per_name.push_back(std::move(axes));
    }
  }
  for (size_t i = 1; i < all.size(); ++i) {
    TESSEL_CHECK(all[i - 1] < all[i], op, ": the axes [", absl::StrJoin(names, ", "),
                 "] overlap or are not in the root mesh's order ", root_topology_->ToString());
  }
  return per_name;
}

DeviceMesh DeviceMesh::SliceWithFlattened(std::span<const std::string> names) const {
  std::vector<comm::ProcessGroupPtr> groups;  // a root axis's group, or the flattened name's own
  {
    std::lock_guard<std::mutex> lock(flattened_->mu);
    for (const std::string& name : names) {
      if (const std::optional<int> a = root_topology_->FindAxis(name)) {
        groups.push_back(axis_groups_[static_cast<size_t>(*a)]);
        continue;
      }
      const FlattenedAxes::Entry* e = FlattenedLocked(name);
      if (e == nullptr) {
        std::vector<std::string> known;
        for (const FlattenedAxes::Entry& f : flattened_->entries) known.push_back(f.name);
        TESSEL_FAIL(ErrorCode::kInvalidArgument, "DeviceMesh: unknown axis '", name, "'; the mesh has axes [",
                    absl::StrJoin(root_topology_->axis_names(), ", "), "] and flattened axes [",
                    absl::StrJoin(known, ", "), "] (", ToString(), ")");
      }
      groups.push_back(e->group);
    }
  }
  return OverRootAxes(std::vector<std::string>(names.begin(), names.end()), std::move(groups));
}

DeviceMesh DeviceMesh::OverRootAxes(std::vector<std::string> names, std::vector<comm::ProcessGroupPtr> groups) const {
  // Each name stands for one root axis or several (a flattened name), merged into one axis: adjacent root
  // axes merged keep the row-major rank order, so the mesh's ranks are the root slice's, reshaped.
  std::vector<int> root_axes;
  std::vector<int64_t> shape;  // one size per name
  for (const std::vector<int>& axes : RootAxesOf(names, "DeviceMesh")) {
    int64_t n = 1;
    for (int a : axes) n *= root_topology_->size(a);
    root_axes.insert(root_axes.end(), axes.begin(), axes.end());
    shape.push_back(n);
  }
  const std::optional<std::vector<int64_t>> root_coordinate = root_topology_->CoordinateOf(global_rank_);
  TESSEL_INTERNAL_ASSERT(root_coordinate.has_value(), "DeviceMesh: rank ", global_rank_, " is not in ",
                         root_topology_->ToString());
  const MeshTopology slice = root_topology_->Slice(root_axes, *root_coordinate);
  auto sub = std::make_shared<const MeshTopology>(std::move(shape), std::move(names), slice.ranks());
  return DeviceMesh(std::move(sub), global_rank_, std::move(groups), root_, root_topology_, flattened_);
}

DeviceMesh DeviceMesh::Flatten(std::span<const std::string> axes, std::string name) const {
  CheckMember("DeviceMesh::Flatten");
  const std::vector<int> idx = topology_->AxesOf(axes);  // validates names against this mesh
  TESSEL_CHECK(!root_topology_->FindAxis(name).has_value() || (axes.size() == 1 && axes[0] == name),
               "DeviceMesh::Flatten: name '", name, "' is already an axis of ", root_topology_->ToString());
  // The root axes under `axes`, a flattened axis standing for its own (clip_grad_norm_ flattens FSDP + TP's
  // [dp_shard_cp, tp] mesh).
  std::vector<int> root_axes;
  for (const std::vector<int>& a : RootAxesOf(axes, "DeviceMesh::Flatten")) {
    root_axes.insert(root_axes.end(), a.begin(), a.end());
  }
  auto flat = std::make_shared<const MeshTopology>(topology_->Flatten(idx, coordinate_, name));
  std::lock_guard<std::mutex> lock(flattened_->mu);
  if (const FlattenedAxes::Entry* e = FlattenedLocked(name)) {
    TESSEL_CHECK(e->root_axes == root_axes, "DeviceMesh::Flatten: name '", name, "' already names other flattened ",
                 "axes of ", root_topology_->ToString());
    return DeviceMesh(std::move(flat), global_rank_, {e->group}, root_, root_topology_, flattened_);
  }
  comm::ProcessGroupPtr group = CreateGroups(root_, *root_topology_, root_axes, name);
  flattened_->entries.push_back({name, root_axes, group});
  return DeviceMesh(std::move(flat), global_rank_, {std::move(group)}, root_, root_topology_, flattened_);
}

std::vector<std::string> DeviceMesh::FlattenedNames() const {
  std::lock_guard<std::mutex> lock(flattened_->mu);
  std::vector<std::string> names;
  for (const FlattenedAxes::Entry& e : flattened_->entries) names.push_back(e.name);
  return names;
}

DeviceMesh DeviceMesh::Flatten(std::initializer_list<std::string_view> axes, std::string name) const {
  const std::vector<std::string> names = ToStrings(axes);
  return Flatten(std::span<const std::string>(names), std::move(name));
}

DeviceMesh DeviceMesh::Join(const DeviceMesh& other) const {
  CheckMember("DeviceMesh::Join");
  TESSEL_CHECK(SharesRootWith(other), "DeviceMesh::Join: ", ToString(), " and ", other.ToString(),
               " come from different root meshes (",
               root_topology_->ToString(), " vs ", other.root_topology_->ToString(), ")");
  // Every axis of both meshes with its group, ordered by the first root axis it stands for (a flattened
  // axis, e.g. FSDP's "dp_shard_cp", stands for several); OverRootAxes checks they neither overlap nor interleave.
  struct Named {
    int first_root_axis;
    std::string name;
    comm::ProcessGroupPtr group;
  };
  std::vector<Named> named;
  for (const DeviceMesh* m : {this, &other}) {
    for (int a = 0; a < m->ndim(); ++a) {
      const std::string& name = m->topology().axis_name(a);
      const int first = RootAxesOf(std::span<const std::string>(&name, 1), "DeviceMesh::Join").front().front();
      for (const Named& n : named) {
        TESSEL_CHECK(n.name != name, "DeviceMesh::Join: axis '", name, "' is in both ", ToString(), " and ",
                     other.ToString());
      }
      named.push_back({first, name, m->axis_group(a)});
    }
  }
  std::sort(named.begin(), named.end(),
            [](const Named& x, const Named& y) { return x.first_root_axis < y.first_root_axis; });
  std::vector<std::string> names;
  std::vector<comm::ProcessGroupPtr> groups;
  for (Named& n : named) {
    names.push_back(std::move(n.name));
    groups.push_back(std::move(n.group));
  }
  return OverRootAxes(std::move(names), std::move(groups));
}

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh) { return os << mesh.ToString(); }

DeviceMesh InitDeviceMesh(const comm::ProcessGroupPtr& world, std::vector<int64_t> shape,
                          std::vector<std::string> axis_names, std::optional<std::vector<int>> ranks) {
  TESSEL_CHECK(world != nullptr, "InitDeviceMesh: no process group");
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (ranks && n == static_cast<int64_t>(ranks->size()) && n < world->size()) {
    return MeshOverSomeRanks(world, std::move(shape), std::move(axis_names), std::move(*ranks));
  }
  TESSEL_CHECK(n == world->size(), "InitDeviceMesh: mesh shape ", ShapeStr(shape), " holds ", n,
               " ranks but the world group '", world->name(), "' has ", world->size(),
               "; the product of the mesh shape must equal the world size (a mesh over some of its ranks lists them)");
  if (ranks) {
    std::vector<int> sorted_mesh = *ranks, sorted_world = world->global_ranks();
    std::sort(sorted_mesh.begin(), sorted_mesh.end());
    std::sort(sorted_world.begin(), sorted_world.end());
    TESSEL_CHECK(sorted_mesh == sorted_world, "DeviceMesh: the mesh's ranks ", ShapeStr(std::vector<int64_t>(
                     ranks->begin(), ranks->end())), " are not the ranks of the world group '", world->name(), "' ",
                 ShapeStr(std::vector<int64_t>(sorted_world.begin(), sorted_world.end())), " each once");
  }
  auto topology = std::make_shared<const MeshTopology>(std::move(shape), std::move(axis_names),
                                                       ranks ? std::move(*ranks) : world->global_ranks());
  std::vector<comm::ProcessGroupPtr> groups;
  for (int a = 0; a < topology->ndim(); ++a) {
    const int axes[] = {a};
    groups.push_back(CreateGroups(world, *topology, axes, topology->axis_name(a)));
  }
  const int me = world->global_ranks()[static_cast<size_t>(world->rank())];
  return DeviceMesh(topology, me, std::move(groups), world, topology);
}

DeviceMesh MeshOfGroup(const comm::ProcessGroupPtr& group, std::string axis_name) {
  TESSEL_CHECK(group != nullptr, "DeviceMesh.from_group: no process group");
  if (axis_name.empty()) axis_name = group->name();
  auto topology = std::make_shared<const MeshTopology>(std::vector<int64_t>{group->size()},
                                                       std::vector<std::string>{std::move(axis_name)},
                                                       group->global_ranks());
  const int me = group->global_ranks()[static_cast<size_t>(group->rank())];
  return DeviceMesh(topology, me, {group}, group, topology);
}

}  // namespace tessel::dtensor
