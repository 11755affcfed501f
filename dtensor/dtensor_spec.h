// dtensor/dtensor_spec.h — DTensorSpec: everything that says how a global tensor lies on a mesh
// (mesh topology, one placement per mesh axis, shard order, global shape/strides, dtype). No data.
//
// Invariant: every DTensorSpec that exists passed Verify() (every constructor calls it), so code that
// holds a spec never re-checks placements against the mesh or the shape. Specs are immutable values
// with ==, a hash and ToString(); the mesh topology is shared (immutable) between copies.
//
// Shard order and PyTorch: the spec stores, per tensor dim, the ordered mesh axes that shard it (PyTorch's
// DTensorSpec.shard_order, a tuple of ShardOrderEntry(tensor_dim, mesh_dims)). The placements stay the
// user-facing per-axis view ([S(0), S(0)] for FSDP-on-TP); PyTorch's older encoding of the same layout
// is [_StridedShard(0, split_factor=2), Shard(0)], given by StridedShardSplitFactors (shard_order.h).
//
// Example:
//   auto mesh = std::make_shared<const MeshTopology>(MeshTopology::Iota({2, 2}, {"dp", "tp"}));
//   DTensorSpec spec(mesh, ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat32,
//                    ShardOrder{{1, 0}, {}});                // TP first, then FSDP (shard_order.h)
//   spec.ToString();  // "DTensorSpec(mesh=(dp=2, tp=2), placements=[S(0), S(0)], order={0: [1, 0]},
//                     //             shape=[8, 8], dtype=float32)"
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"
#include "dtensor/mesh_topology.h"
#include "dtensor/placement.h"
#include "dtensor/shard_order.h"

namespace tessel::dtensor {

class DTensorSpec {
 public:
  // Contiguous global strides; `order` defaults to DefaultShardOrder(placements).
  // Throws kInvalidArgument naming the placements, mesh and shape when Verify() fails.
  DTensorSpec(std::shared_ptr<const MeshTopology> mesh, std::vector<Placement> placements, Shape shape,
              DType dtype, std::optional<ShardOrder> order = std::nullopt);
  DTensorSpec(std::shared_ptr<const MeshTopology> mesh, std::vector<Placement> placements, Shape shape,
              Shape strides, DType dtype, std::optional<ShardOrder> order = std::nullopt);

  const MeshTopology& mesh() const { return *mesh_; }
  const std::shared_ptr<const MeshTopology>& mesh_ptr() const { return mesh_; }
  const std::vector<Placement>& placements() const { return placements_; }
  const Placement& placement(int axis) const { return placements_[static_cast<size_t>(axis)]; }
  const ShardOrder& shard_order() const { return order_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return NumElements(shape_); }

  bool has_partial() const;
  bool is_replicated() const;  // every axis Replicate
  // Number of pieces tensor dim `dim` is cut into (product of the sizes of the axes sharding it).
  int64_t num_shards(int64_t dim) const;

  // The same tensor with other placements (and shard order; default order when omitted).
  DTensorSpec WithPlacements(std::vector<Placement> placements, std::optional<ShardOrder> order = std::nullopt) const;

  // "DTensorSpec(mesh=(dp=2, tp=2), placements=[S(0), R], shape=[8, 8], dtype=float32)"; the order is
  // printed only when it is not the default one, strides only when they are not contiguous.
  std::string ToString() const;
  size_t Hash() const;
  friend bool operator==(const DTensorSpec& a, const DTensorSpec& b);

 private:
  // Checks:
  //   1. the mesh is set;
  //   2. one placement per mesh axis;
  //   3. Shard(d) has 0 <= d < ndim;
  //   4. Partial ops are sum, avg, max or min;
  //   5. strides have ndim entries; sizes >= 0;
  //   6. order has ndim entries; axis a is in order[d] iff placements[a] == Shard(d), exactly once.
  void Verify() const;

  std::shared_ptr<const MeshTopology> mesh_;
  std::vector<Placement> placements_;
  ShardOrder order_;
  Shape shape_;
  Shape strides_;
  DType dtype_;
};

std::ostream& operator<<(std::ostream& os, const DTensorSpec& spec);

}  // namespace tessel::dtensor

template <>
struct std::hash<tessel::dtensor::DTensorSpec> {
  size_t operator()(const tessel::dtensor::DTensorSpec& s) const noexcept { return s.Hash(); }
};
