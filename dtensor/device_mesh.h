// dtensor/device_mesh.h — DeviceMesh: an N-D grid of global ranks with named axes and one ProcessGroup
// per axis (the group of the ranks that share every other coordinate), as PyTorch's DeviceMesh.
//
// Invariant: a DeviceMesh contains the calling rank (coordinate() is defined), except the one a rank outside a
// mesh over some of the world's ranks gets (is_member() false: torch's non-participating rank, whose
// get_coordinate() is None; its layout queries work, and whatever needs a coordinate or a group is
// kFailedPrecondition naming the rank and the mesh). axis_group(a) has
// size(a) members ordered by their coordinate on `a` and is named after the axis, so the comm tracer
// shows "tp"/"dp". The shape/rank logic lives in MeshTopology (mesh_topology.h, testable without
// groups); a DeviceMesh is a cheap copyable handle (shared topology, shared groups). Creating a mesh
// or flattening axes is collective: every rank of the root group calls it with the same arguments.
//
// Example:
//   comm::RunRanks(4, [](comm::ProcessGroupPtr world) {
//     DeviceMesh mesh = InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
//     mesh.ToString();          // "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 1], [2, 3]])"
//     DeviceMesh tp = mesh["tp"];                      // 1-D, ranks {2r, 2r+1}
//     mesh.axis_group("dp")->AllReduce(grad, comm::ReduceOp::kAvg)->Wait();
//     DeviceMesh flat = mesh.Flatten({"dp", "tp"}, "dp_tp");   // collective: all ranks call it
//   });
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/process_group.h"
#include "dtensor/mesh_topology.h"

namespace tessel::dtensor {

// The axes flattened from one root mesh on this rank (DeviceMesh::Flatten registers them; shared by every
// mesh derived from that root, never across ranks).
struct FlattenedAxes {
  std::mutex mu;
  struct Entry {
    std::string name;
    std::vector<int> root_axes;  // in root order
    comm::ProcessGroupPtr group;
  };
  std::vector<Entry> entries;  // guarded by mu
};

class DeviceMesh {
 public:
  // Low level: the mesh `topology` seen from `global_rank`, with one group per axis. `root` and
  // `root_topology` are the group and mesh InitDeviceMesh started from (Flatten creates groups there).
  // REQUIRES: global_rank in topology; axis_groups.size() == topology.ndim(); axis names of topology
  // are axis names of root_topology.
  // `flattened` is the root's registry of Flatten results (null: a new, empty one).
  DeviceMesh(std::shared_ptr<const MeshTopology> topology, int global_rank,
             std::vector<comm::ProcessGroupPtr> axis_groups, comm::ProcessGroupPtr root,
             std::shared_ptr<const MeshTopology> root_topology,
             std::shared_ptr<FlattenedAxes> flattened = nullptr);

  // The mesh `topology` seen from `global_rank`, which is not in it (see the invariant above).
  static DeviceMesh NonMember(std::shared_ptr<const MeshTopology> topology, int global_rank);

  const MeshTopology& topology() const { return *topology_; }
  const std::shared_ptr<const MeshTopology>& topology_ptr() const { return topology_; }
  int ndim() const { return topology_->ndim(); }
  const std::vector<int64_t>& shape() const { return topology_->shape(); }
  int64_t size() const { return topology_->numel(); }
  int64_t size(int axis) const { return topology_->size(axis); }
  int64_t size(std::string_view axis) const { return topology_->size(topology_->AxisIndex(axis)); }
  const std::vector<std::string>& axis_names() const { return topology_->axis_names(); }

  int global_rank() const { return global_rank_; }
  // Whether the calling rank is in the mesh (false only for NonMember meshes).
  bool is_member() const { return !axis_groups_.empty(); }
  // This rank's coordinate, one entry per axis.
  const std::vector<int64_t>& coordinate() const;
  // This rank's coordinate on `axis` (= its rank in axis_group(axis)).
  int64_t local_rank(int axis) const;
  int64_t local_rank(std::string_view axis) const { return local_rank(topology_->AxisIndex(axis)); }
  const comm::ProcessGroupPtr& axis_group(int axis) const;
  const comm::ProcessGroupPtr& axis_group(std::string_view axis) const {
    return axis_group(topology_->AxisIndex(axis));
  }

  // Sub-meshes containing this rank: mesh["tp"], mesh[{"dp", "tp"}]. Names must exist and be given in
  // mesh order (kInvalidArgument otherwise). No communication: the sub-mesh reuses the axis groups. On the
  // root mesh a name may also be one that Flatten registered (PyTorch's root-mesh slicing of flattened
  // dims, torchtitan's mesh["dp_shard_cp"] or mesh[{"dp_replicate", "dp_shard_cp"}]): it stands for its
  // root axes, which must not overlap the others' and keep root order; the result has one axis per name.
  DeviceMesh operator[](std::string_view axis) const;
  DeviceMesh operator[](std::initializer_list<std::string_view> axes) const;
  DeviceMesh Slice(std::span<const std::string> axes) const;
  // A 1-D mesh named `name` over the ranks of this rank's sub-mesh on `axes` (row-major), with its own
  // group. Collective: every rank of the root group calls Flatten with the same axes and name. Registered
  // on the root under `name`: flattening the same root axes under the same name again returns the same
  // mesh and group (no communication, as PyTorch caches it); the name for other axes is kInvalidArgument.
  DeviceMesh Flatten(std::span<const std::string> axes, std::string name) const;
  DeviceMesh Flatten(std::initializer_list<std::string_view> axes, std::string name) const;
  // The names Flatten registered on this mesh's root so far, in order.
  std::vector<std::string> FlattenedNames() const;

  // The sub-mesh of the root mesh over this mesh's axes and `other`'s, in root axis order, reusing both
  // meshes' groups (no communication): mesh["dp"].Join(mesh["tp"]) == mesh[{"dp", "tp"}]. This is how
  // fully_shard(mesh["dp"]) composes with parameters tensor parallelism placed on mesh["tp"], as in PyTorch;
  // an axis may be a flattened one (torchtitan's fully_shard over "dp_shard_cp" with TP on "tp").
  // REQUIRES: both come from the same InitDeviceMesh and share no axis, nor root axes through a flattened
  // one, and a flattened axis's root axes are not interleaved with the other's (kInvalidArgument otherwise).
  DeviceMesh Join(const DeviceMesh& other) const;
  // Whether both meshes come from the same InitDeviceMesh (what Join requires).
  bool SharesRootWith(const DeviceMesh& other) const {
    return root_topology_ == other.root_topology_ || *root_topology_ == *other.root_topology_;
  }

  // "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 1], [2, 3]])"
  std::string ToString() const { return topology_->ToString(); }
  // Equal when shape, axis names and ranks are equal (PyTorch compares the same, not the groups).
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    return a.topology_ == b.topology_ || *a.topology_ == *b.topology_;
  }

 private:
  std::shared_ptr<const MeshTopology> topology_;
  int global_rank_;
  std::vector<int64_t> coordinate_;
  std::vector<comm::ProcessGroupPtr> axis_groups_;
  // Slice() of the root over names that include flattened ones.
  DeviceMesh SliceWithFlattened(std::span<const std::string> names) const;
  // kFailedPrecondition naming `op`, this rank and the mesh unless is_member().
  void CheckMember(std::string_view op) const;
  // The mesh over `names` (root axes or names Flatten registered, in root order, not overlapping) with one
  // group per name.
  DeviceMesh OverRootAxes(std::vector<std::string> names, std::vector<comm::ProcessGroupPtr> groups) const;
  // Per name, the root axes it stands for (its own, or those Flatten registered under it); kInvalidArgument
  // naming `op` for a name that is neither, or names whose root axes overlap or leave root order.
  std::vector<std::vector<int>> RootAxesOf(std::span<const std::string> names, std::string_view op) const;
  // The entry Flatten registered under `name`, or null. REQUIRES: flattened_->mu held.
  const FlattenedAxes::Entry* FlattenedLocked(std::string_view name) const;

  comm::ProcessGroupPtr root_;
  std::shared_ptr<const MeshTopology> root_topology_;
  std::shared_ptr<FlattenedAxes> flattened_;
};

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh);

// Builds a mesh over all members of `world` (row-major in world group-rank order, or the global ranks in
// `ranks`, row-major, when given: PyTorch's DeviceMesh(device_type, mesh) with any layout) and creates one
// group per axis with world->NewGroup. Collective over `world`. Empty `axis_names` means "axis0", "axis1", ...
// `ranks` may also be some of the world's ranks (torch's mesh smaller than the world): then only those ranks
// take part, over a group of their own (NewGroupAmongMembers), and any other rank gets a NonMember mesh at
// once, without communication.
// Throws kInvalidArgument when the shape's product differs from the number of ranks, for duplicate or empty
// names, a names/shape length mismatch, or `ranks` that are not world ranks each at most once.
DeviceMesh InitDeviceMesh(const comm::ProcessGroupPtr& world, std::vector<int64_t> shape,
                          std::vector<std::string> axis_names = {}, std::optional<std::vector<int>> ranks = {});

// The 1-D mesh over an existing group (torch's DeviceMesh.from_group): its one axis is `group` itself,
// named `axis_name` (empty: the group's name). The group keeps its own name, which the comm tracer shows (the
// one exception to the axis-named groups above). Not collective and creates no group. kInvalidArgument for a
// null group.
DeviceMesh MeshOfGroup(const comm::ProcessGroupPtr& group, std::string axis_name = "");

}  // namespace tessel::dtensor
