// dtensor/layout.h — pure layout math: which part of the global tensor a mesh coordinate holds.
//
// Invariant: these functions match PyTorch's compute_local_shape_and_global_offset bit for bit for every
// placement list it supports (torch.chunk pieces, nested sharding outer axis first, an empty piece's
// global offset = the global dim size), and extend it to explicit shard orders (shard_order.h). They
// are pure functions of integers: no mesh, no process group, no tensor. See [Note: Placement semantics]
// in placement.h for the tables.
//
// A rank's region is always one box: one contiguous (offset, length) interval per tensor dim, in every
// shard order, because chunking a contiguous range yields a contiguous range. (PyTorch's _StridedShard
// replays a non-default order left to right and meets non-contiguous intermediate index sets; an
// explicit order never materializes them.)
//
// Example:
//   LocalLayout l = ComputeLocalShapeAndGlobalOffset({8}, {3, 2}, ParsePlacements("S(0), S(0)"), {1, 1});
//   // l.local_shape == {1}, l.global_offset == {5}
//   ChunkPieceOf(5, 4, 3);   // {.size = 0, .offset = 5}
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor/shape.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/placement.h"
#include "dtensor/shard_order.h"

namespace tessel::dtensor {

// Piece `index` of `n` elements cut into `num_chunks` torch.chunk pieces: its size and its offset in
// the cut range (`n` for an empty piece; PyTorch's Shard.local_shard_size_and_offset).
struct ChunkPiece {
  int64_t size = 0;
  int64_t offset = 0;
  friend bool operator==(const ChunkPiece&, const ChunkPiece&) = default;
};
ChunkPiece ChunkPieceOf(int64_t n, int64_t num_chunks, int64_t index);

// A contiguous range of one global tensor dim. An empty range has offset = the global dim size.
struct DimInterval {
  int64_t offset = 0;
  int64_t length = 0;
  friend bool operator==(const DimInterval&, const DimInterval&) = default;
};

// The range of a dim of global size `global_size` that coordinate `coordinate` holds after chunking by
// `axes` in that order (a prefix of a shard order gives the intermediate ranges the executor needs).
DimInterval DimExtent(int64_t global_size, std::span<const int> axes, std::span<const int64_t> mesh_shape,
                      std::span<const int64_t> coordinate);

struct LocalLayout {
  Shape local_shape;
  Shape global_offset;
};

// Default shard order (PyTorch's layout). REQUIRES: placements.size() == mesh_shape.size() ==
// coordinate.size(); Shard dims < global_shape.size() (checked, kInvalidArgument).
LocalLayout ComputeLocalShapeAndGlobalOffset(std::span<const int64_t> global_shape,
                                             std::span<const int64_t> mesh_shape,
                                             std::span<const Placement> placements,
                                             std::span<const int64_t> coordinate);
// Explicit shard order (REQUIRES: consistent with placements, as DTensorSpec::Verify checks).
LocalLayout ComputeLocalShapeAndGlobalOffset(std::span<const int64_t> global_shape,
                                             std::span<const int64_t> mesh_shape,
                                             std::span<const Placement> placements, const ShardOrder& order,
                                             std::span<const int64_t> coordinate);
LocalLayout ComputeLocalShapeAndGlobalOffset(const DTensorSpec& spec, std::span<const int64_t> coordinate);
// Only the shape (no offsets); the shape a rank's local tensor must have.
Shape ComputeLocalShape(const DTensorSpec& spec, std::span<const int64_t> coordinate);

// The box a coordinate holds: one interval per tensor dim (see the file comment for why one suffices).
std::vector<DimInterval> GlobalIntervals(const DTensorSpec& spec, std::span<const int64_t> coordinate);

// Every rank of the mesh with its coordinate and box, in mesh (row-major) order; what
// VisualizeSharding prints and what a checkpoint's metadata records.
struct RankRegion {
  int rank = 0;
  std::vector<int64_t> coordinate;
  std::vector<DimInterval> intervals;
};
std::vector<RankRegion> AllRankRegions(const DTensorSpec& spec);

}  // namespace tessel::dtensor
