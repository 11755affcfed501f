// examples/gpt/parallel_dims.h — ParallelDims (torchtitan's ParallelDims): the layout pp × dp_replicate ×
// dp_shard × tp of a world of ranks, validated against the world size, and ParallelMesh, the one device
// mesh (pp, dp_replicate, dp_shard, tp) built from it with each primitive's sub-mesh / group.
//
// Invariant: every axis size is >= 1 and their product equals the world size; the mesh holds exactly the
// axes of size > 1, in the order pp, dp_replicate, dp_shard, tp (torchtitan drops size-1 axes too), so the
// comm tracer names the groups "pp", "dp_replicate", "dp_shard", "tp". It lives in examples/ because it
// feeds pipelining/, tp/ and fsdp/, which never include each other.
//
// Sub-meshes, by primitive:
//   pipelining   pp_group(): the "pp" axis group (nullptr when pp == 1: no pipeline)
//   tp + fsdp    spmd_mesh(): the axes among (dp_replicate, dp_shard, tp) present, or nullopt when all
//                are 1. fully_shard takes the whole of it and uses the axes TP leaves free: dp_shard alone
//                = FSDP, dp_replicate and dp_shard = HSDP, dp_replicate alone = HSDP-free replication is
//                not offered (kInvalidArgument: use dp_shard for plain data parallelism)
//   data         dp_rank() / dp_size(): which rows of the global batch this rank trains on
//
// Example (8 ranks of the threads backend):
//   ParallelDims dims{.pp = 2, .dp_shard = 2, .tp = 2};
//   ParallelMesh pm = ParallelMesh::Build(world, dims);   // mesh (pp 2, dp_shard 2, tp 2)
//   pm.pp_group()->size();                                // 2
//   pm.spmd_mesh()->axis_names();                         // {"dp_shard", "tp"}
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "comm/process_group.h"
#include "dtensor/device_mesh.h"

namespace tessel::examples {

struct ParallelDims {
  int64_t pp = 1, dp_replicate = 1, dp_shard = 1, tp = 1;

  int64_t world_size() const { return pp * dp_replicate * dp_shard * tp; }
  int64_t dp_size() const { return dp_replicate * dp_shard; }
  // "pp 2 x dp_replicate 1 x dp_shard 2 x tp 2".
  std::string ToString() const;
  // Throws kInvalidArgument naming the axis: a size < 1, dp_replicate > 1 without dp_shard > 1, or a
  // product different from `world_size`.
  void Validate(int64_t world_size) const;
};

class ParallelMesh {
 public:
  // Validates `dims` against world->size() and creates the mesh. Collective over `world`.
  static ParallelMesh Build(const comm::ProcessGroupPtr& world, const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  // The whole mesh (axes of size > 1); nullopt on a 1-rank world.
  const std::optional<dtensor::DeviceMesh>& mesh() const { return mesh_; }
  const comm::ProcessGroupPtr& pp_group() const { return pp_group_; }
  const std::optional<dtensor::DeviceMesh>& spmd_mesh() const { return spmd_mesh_; }
  // This rank's index among the dp_replicate × dp_shard data-parallel ranks (row-major).
  int64_t dp_rank() const { return dp_rank_; }
  // The "dp_replicate"/"dp_shard" ranks as one group (all-reduce of the loss); nullptr when dp_size == 1.
  const comm::ProcessGroupPtr& dp_group() const { return dp_group_; }

 private:
  ParallelDims dims_;
  std::optional<dtensor::DeviceMesh> mesh_, spmd_mesh_;
  comm::ProcessGroupPtr pp_group_, dp_group_;
  int64_t dp_rank_ = 0;
};

}  // namespace tessel::examples
