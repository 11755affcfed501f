// dtensor/random.h — random initialization through a DTensor with offset-based (counter) generation: every
// rank draws only its own shard, and the values equal full init then distribute, bit for bit.
//
// Invariant: RandomDTensor(shape, mesh, placements, gen, dist) gives each rank exactly the block of the
// full tensor Random(shape, gen', dist) (gen' = a copy of gen) that DistributeTensor would give it, on
// any mesh, placements and shard order, uneven sizes included; and it advances `gen` by the GLOBAL
// numel on every rank (like the full draw), so later draws stay in step across ranks and with an
// unsharded run. It relies on core/tensor/random.h's block exactness (element i of a draw at offset
// `base` depends only on (seed, base + i)) and uses the shard's global offset from the layout math. No
// communication. Every rank must pass a generator in the same state (PyTorch's manual_seed contract);
// Partial placements are rejected (a random value has no partial form).
//
// Example:
//   Generator gen(42);                                          // same seed on every rank
//   DTensor w = RandnDTensor({8, 6}, mesh, ParsePlacements("S(0)"), gen);
//   Generator ref(42);
//   DistributeTensor(Randn({8, 6}, ref), mesh, ParsePlacements("S(0)"));   // same local values
#pragma once

#include <optional>
#include <vector>

#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "dtensor/placement.h"
#include "dtensor/shard_order.h"

namespace tessel::dtensor {

DTensor RandomDTensor(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements, Generator& gen,
                      Distribution dist, DType dtype = DType::kFloat32,
                      std::optional<ShardOrder> shard_order = std::nullopt);
// Writes a fresh draw of `dist` (the tensor's global shape, from `gen`) into `d` in place: this rank's box,
// computed alone, as RandomDTensor. Advances gen by the draw's counters on every rank, members of the mesh or
// not; Partial placements are rejected (kInvalidArgument), as there. Not recorded by autograd.
void FillRandomDTensor(const DTensor& d, Generator& gen, Distribution dist);

DTensor RandnDTensor(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements, Generator& gen,
                     DType dtype = DType::kFloat32);
DTensor RandDTensor(const Shape& shape, const DeviceMesh& mesh, std::vector<Placement> placements, Generator& gen,
                    DType dtype = DType::kFloat32);

}  // namespace tessel::dtensor
