// dtensor/shard_order.h — ShardOrder: for each tensor dim, the mesh axes that shard it, in the order the
// chunking is applied (first axis chunks the global dim, the next chunks that piece, ...).
//
// Invariant (checked by DTensorSpec::Verify): order.size() == tensor ndim; axis a appears in order[d]
// iff placements[a] == Shard(d), and then exactly once. The default order lists the axes of each dim in
// mesh-axis order (outer first), which is PyTorch's left-to-right nested sharding.
//
// Why an explicit order (and how it maps to PyTorch): FSDP on top of TP shards a weight first over "tp"
// (tensor parallel) and then its local piece over "dp" (fully_shard), so on mesh (dp, tp) dim 0 has
// order [tp, dp] although dp is the outer axis. PyTorch first expressed this with the _StridedShard
// placement (a Shard that remembers a split_factor) and now also with DTensorSpec.shard_order, a tuple of
// ShardOrderEntry(tensor_dim, mesh_dims) — exactly this type, stored densely. The conversion to
// _StridedShard is StridedShardSplitFactors: the split factor of axis a is the product of the sizes of
// the axes that come before a in its dim's order but after a in mesh order (1 means a plain Shard).
//
// Example:
//   // mesh (dp, tp) = (2, 2), placements [S(0), S(0)]
//   ShardOrder tp_then_dp = {{1, 0}, {}};          // dim 0: tp first, then dp; dim 1 unsharded
//   DefaultShardOrder(placements, 2);              // {{0, 1}, {}}
//   StridedShardSplitFactors(tp_then_dp, {2, 2});  // {2, 1}: [_StridedShard(0, sf=2), Shard(0)]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dtensor/placement.h"

namespace tessel::dtensor {

// order[d] = mesh axes sharding tensor dim d, in chunking order.
using ShardOrder = std::vector<std::vector<int>>;

// Every Shard(d) axis appended to order[d] in mesh-axis order.
// REQUIRES: every Shard dim in [0, ndim) (DTensorSpec::Verify reports violations with context).
ShardOrder DefaultShardOrder(std::span<const Placement> placements, int64_t ndim);
bool IsDefaultShardOrder(const ShardOrder& order);
// "{0: [1, 0], 2: [2]}" — only the sharded dims; "{}" when nothing is sharded.
std::string ShardOrderToString(const ShardOrder& order);
// PyTorch's _StridedShard split factor per mesh axis (1 for plain Shard and non-Shard axes).
std::vector<int64_t> StridedShardSplitFactors(const ShardOrder& order, std::span<const int64_t> mesh_shape);

// The inverse: the shard order whose StridedShardSplitFactors are `split_factors` (one per mesh axis, 1 for a
// plain Shard), i.e. PyTorch's [_StridedShard(0, sf=2), Shard(0)] read back as order {{1, 0}}. For each
// tensor dim, the permutation of the axes sharding it whose factors match. kInvalidArgument when no order
// gives them (naming the placements and factors).
ShardOrder ShardOrderFromSplitFactors(std::span<const Placement> placements, std::span<const int64_t> split_factors,
                                      std::span<const int64_t> mesh_shape, int64_t ndim);

}  // namespace tessel::dtensor
