// dtensor/random.cc — RandomDTensor / FillRandomDTensor: this rank's block of a full counter-based draw.
#include "dtensor/random.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {

DTensor RandomDTensor(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements, Generator& gen,
                      Distribution dist, DType dtype, std::optional<ShardOrder> shard_order) {
  for (Placement& p : placements) {
    TESSEL_CHECK(!IsPartial(p), "RandomDTensor: placements ", PlacementsToString(placements), " on ", mesh.ToString(),
                 " hold a Partial; random tensors can only be sharded or replicated (rank ", mesh.global_rank(), ")");
    if (Shard* s = std::get_if<Shard>(&p); s != nullptr && s->dim < 0) s->dim += static_cast<int64_t>(shape.size());
  }
  DTensorSpec spec(mesh.topology_ptr(), std::move(placements), shape, dtype, std::move(shard_order));
  const LocalLayout layout = ComputeLocalShapeAndGlobalOffset(spec, mesh.coordinate());
  CheckDraw(dist, dtype);  // before the local tensor is allocated
  DTensor d(MakeDTensor(Empty(layout.local_shape, dtype), std::move(spec), mesh));
  FillRandomDTensor(d, gen, dist);
  return d;
}

void FillRandomDTensor(const DTensor& d, Generator& gen, Distribution dist) {
  const DTensorSpec& spec = d.spec();
  const bool partial = std::any_of(spec.placements().begin(), spec.placements().end(),
                                   [](const Placement& p) { return IsPartial(p); });
  TESSEL_CHECK(!partial, "random fill of a DTensor with placements ", PlacementsToString(spec.placements()), " on ",
               d.mesh().ToString(), ": a Partial placement has no random form (redistribute it to Replicate or Shard "
               "first; rank ", d.mesh().global_rank(), ")");
  CheckDraw(dist, spec.dtype());
  const uint64_t base = gen.Advance(CountersFor(dist, static_cast<uint64_t>(spec.numel())));
  if (!d.mesh().is_member()) return;
  const Shape& shape = spec.shape();
  const LocalLayout layout = ComputeLocalShapeAndGlobalOffset(spec, d.mesh().coordinate());
  FillRandomBlock(d.ToLocal(), shape, layout.global_offset, gen.seed(), base, dist);
}

DTensor RandnDTensor(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements, Generator& gen,
                     DType dtype) {
  return RandomDTensor(shape, mesh, std::move(placements), gen, Distribution::Normal(), dtype);
}

DTensor RandDTensor(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements, Generator& gen,
                    DType dtype) {
  return RandomDTensor(shape, mesh, std::move(placements), gen, Distribution::Uniform(), dtype);
}

}  // namespace tessel::dtensor
