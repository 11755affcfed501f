// examples/gpt/parallel_dims.cc — ParallelDims validation and the (pp, dp_replicate, dp_shard, tp) mesh.
#include "examples/gpt/parallel_dims.h"

#include <utility>
#include <vector>

#include "core/base/error.h"

namespace tessel::examples {
namespace {

// The axes in mesh order with their sizes.
std::vector<std::pair<std::string, int64_t>> Axes(const ParallelDims& d) {
  return {{"pp", d.pp}, {"dp_replicate", d.dp_replicate}, {"dp_shard", d.dp_shard}, {"tp", d.tp}};
}

}  // namespace

std::string ParallelDims::ToString() const {
  std::string out;
  for (const auto& [name, size] : Axes(*this)) out += (out.empty() ? "" : " x ") + name + " " + std::to_string(size);
  return out;
}

void ParallelDims::Validate(int64_t world_size) const {
  for (const auto& [name, size] : Axes(*this)) {
    TESSEL_CHECK(size >= 1, "ParallelDims: mesh axis '", name, "' has size ", size, ", expected >= 1 (", ToString(),
                 ")");
  }
  TESSEL_CHECK(dp_replicate == 1 || dp_shard > 1, "ParallelDims: mesh axis 'dp_replicate' of size ", dp_replicate,
               " needs 'dp_shard' > 1 (HSDP); fully_shard would shard over 'dp_replicate' alone (", ToString(), ")");
  TESSEL_CHECK(this->world_size() == world_size, "ParallelDims: ", ToString(), " = ", this->world_size(),
               " ranks, but the world has ", world_size, " ranks");
}

ParallelMesh ParallelMesh::Build(const comm::ProcessGroupPtr& world, const ParallelDims& dims) {
  dims.Validate(world->size());
  ParallelMesh out;
  out.dims_ = dims;
  std::vector<int64_t> shape;
  std::vector<std::string> names, spmd, dp;
  for (const auto& [name, size] : Axes(dims)) {
    if (size == 1) continue;
    shape.push_back(size);
    names.push_back(name);
    if (name != "pp") spmd.push_back(name);
    if (name == "dp_replicate" || name == "dp_shard") dp.push_back(name);
  }
  if (shape.empty()) return out;  // one rank: nothing to build
  out.mesh_ = dtensor::InitDeviceMesh(world, shape, names);
  if (dims.pp > 1) out.pp_group_ = out.mesh_->axis_group("pp");
  if (!spmd.empty()) out.spmd_mesh_ = out.mesh_->Slice(spmd);
  if (dp.size() == 1) {
    out.dp_group_ = out.mesh_->axis_group(dp[0]);
  } else if (dp.size() == 2) {
    out.dp_group_ = out.mesh_->Flatten(dp, "dp").axis_group("dp");
  }
  if (out.dp_group_) out.dp_rank_ = out.dp_group_->rank();
  return out;
}

}  // namespace tessel::examples
