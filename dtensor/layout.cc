// dtensor/layout.cc — torch.chunk pieces, nested extents and local shapes/offsets.
#include "dtensor/layout.h"

#include "core/base/error.h"

namespace tessel::dtensor {

ChunkPiece ChunkPieceOf(int64_t n, int64_t num_chunks, int64_t index) {
  TESSEL_INTERNAL_ASSERT(num_chunks >= 1 && index >= 0 && index < num_chunks && n >= 0, "ChunkPieceOf(", n, ", ",
                         num_chunks, ", ", index, ")");
  const int64_t full = (n + num_chunks - 1) / num_chunks;
  const int64_t start = full * index;
  if (start >= n) return {0, n};
  return {std::min(n, start + full) - start, start};
}

DimInterval DimExtent(int64_t global_size, std::span<const int> axes, std::span<const int64_t> mesh_shape,
                      std::span<const int64_t> coordinate) {
  DimInterval r{0, global_size};
  for (int a : axes) {
    const size_t ua = static_cast<size_t>(a);
    const ChunkPiece p = ChunkPieceOf(r.length, mesh_shape[ua], coordinate[ua]);
    r.length = p.size;
    r.offset += p.offset;
  }
  if (r.length == 0) r.offset = global_size;  // PyTorch: an empty shard reports the global dim size
  return r;
}

LocalLayout ComputeLocalShapeAndGlobalOffset(std::span<const int64_t> global_shape,
                                             std::span<const int64_t> mesh_shape,
                                             std::span<const Placement> placements,
                                             std::span<const int64_t> coordinate) {
  TESSEL_CHECK(placements.size() == mesh_shape.size() && coordinate.size() == mesh_shape.size(),
               "ComputeLocalShapeAndGlobalOffset: ", placements.size(), " placements ",
               PlacementsToString(placements), " and coordinate ", ShapeStr(coordinate), " for mesh shape ",
               ShapeStr(mesh_shape), "; expected one of each per mesh axis");
  const int64_t ndim = static_cast<int64_t>(global_shape.size());
  for (const Placement& p : placements) {
    if (const Shard* s = std::get_if<Shard>(&p)) {
      TESSEL_CHECK(s->dim >= 0 && s->dim < ndim, "ComputeLocalShapeAndGlobalOffset: ", s->ToString(),
                   " on a tensor of shape ", ShapeStr(global_shape), " (placements ", PlacementsToString(placements),
                   ")");
    }
  }
  return ComputeLocalShapeAndGlobalOffset(global_shape, mesh_shape, placements, DefaultShardOrder(placements, ndim),
                                          coordinate);
}

LocalLayout ComputeLocalShapeAndGlobalOffset(std::span<const int64_t> global_shape,
                                             std::span<const int64_t> mesh_shape,
                                             std::span<const Placement> /*placements*/, const ShardOrder& order,
                                             std::span<const int64_t> coordinate) {
  TESSEL_CHECK(order.size() == global_shape.size() && coordinate.size() == mesh_shape.size(),
               "ComputeLocalShapeAndGlobalOffset: shard order ", ShardOrderToString(order), " and coordinate ",
               ShapeStr(coordinate), " for shape ", ShapeStr(global_shape), " on mesh shape ", ShapeStr(mesh_shape));
  LocalLayout out;
  out.local_shape.assign(global_shape.begin(), global_shape.end());
  out.global_offset.assign(global_shape.size(), 0);
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (order[d].empty()) continue;
    const DimInterval r = DimExtent(global_shape[d], order[d], mesh_shape, coordinate);
    out.local_shape[d] = r.length;
    out.global_offset[d] = r.offset;
  }
  return out;
}

LocalLayout ComputeLocalShapeAndGlobalOffset(const DTensorSpec& spec, std::span<const int64_t> coordinate) {
  return ComputeLocalShapeAndGlobalOffset(spec.shape(), spec.mesh().shape(), spec.placements(), spec.shard_order(),
                                          coordinate);
}

Shape ComputeLocalShape(const DTensorSpec& spec, std::span<const int64_t> coordinate) {
  Shape shape = spec.shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    const std::vector<int>& axes = spec.shard_order()[d];
    if (!axes.empty()) shape[d] = DimExtent(shape[d], axes, spec.mesh().shape(), coordinate).length;
  }
  return shape;
}

std::vector<DimInterval> GlobalIntervals(const DTensorSpec& spec, std::span<const int64_t> coordinate) {
  const LocalLayout l = ComputeLocalShapeAndGlobalOffset(spec, coordinate);
  std::vector<DimInterval> out;
  for (size_t d = 0; d < l.local_shape.size(); ++d) out.push_back({l.global_offset[d], l.local_shape[d]});
  return out;
}

std::vector<RankRegion> AllRankRegions(const DTensorSpec& spec) {
  const MeshTopology& mesh = spec.mesh();
  std::vector<RankRegion> out;
  out.reserve(static_cast<size_t>(mesh.numel()));
  std::vector<int64_t> coord(static_cast<size_t>(mesh.ndim()), 0);
  for (int64_t flat = 0; flat < mesh.numel(); ++flat) {
    int64_t rem = flat;
    for (int a = mesh.ndim() - 1; a >= 0; --a) {
      coord[static_cast<size_t>(a)] = rem % mesh.size(a);
      rem /= mesh.size(a);
    }
    out.push_back({mesh.RankAt(coord), coord, GlobalIntervals(spec, coord)});
  }
  return out;
}

}  // namespace tessel::dtensor
