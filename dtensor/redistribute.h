// dtensor/redistribute.h — the redistribute executor (runs a planner's steps on this rank's local tensor
// over the mesh's axis groups) and the differentiable Redistribute op on DTensors.
//
// Invariant: ExecuteRedistribute issues exactly the collectives DryRun lists (same kind, group, bytes,
// order) and returns a new local tensor laid out as the plan's target on this rank; it never writes
// into the source local tensor. Uneven pieces are padded to the largest piece for all_gather and
// reduce_scatter and unpadded afterwards (PyTorch's scheme); all_to_all sends exact, unpadded pieces.
// Redistribute's backward sends the gradient back to GradPlacement(grad, src) on every axis
// (placement.h Note (e)).
//
// Example:
//   Tensor y = Redistribute(x, x_spec.WithPlacements(ParsePlacements("R")));   // one all_gather
//   Backward(y_local, g);                                                       // x.grad(): S(0), no comm
#pragma once

#include <optional>
#include <span>

#include "core/tensor/tensor.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/redistribute_planner.h"

namespace tessel::dtensor {

// Runs `plan` (made for `src`) on this rank. REQUIRES: local matches src at mesh.coordinate().
Tensor ExecuteRedistribute(const Tensor& local, const DTensorSpec& src, const RedistributePlan& plan,
                           const DeviceMesh& mesh);

// The plan moving a DTensor of `spec` (on `mesh`) to `want` (Partial targets allowed, as sharding rules
// ask for them), or nullopt when it already has that layout.
std::optional<RedistributePlan> PlanMove(const DTensorSpec& spec, const ShardingState& want, const DeviceMesh& mesh);

// Moves several DTensors (on `mesh`) to their `wants` (nullopt or an undefined tensor: left undefined),
// returning the new local tensors in order, like ExecuteRedistribute on each; except that the tensors
// whose whole move is one all_reduce on the same (mesh axis, reduce op, dtype, device) share one flat
// all_reduce — coalesced, as PyTorch's DDP buckets: one collective per bucket instead of one per tensor.
// The other moves run first, in input order, then the buckets in key order: the same sequence on every
// rank (plans depend on global specs only). Never writes the inputs' local tensors.
TensorList ExecuteRedistributesCoalesced(std::span<const Tensor> dtensors,
                                         std::span<const std::optional<ShardingState>> wants, const DeviceMesh& mesh);

// torch's redistribute(forward_dtype=, backward_dtype=): the dtypes the collectives run in.
struct RedistributeOptions {
  // The local piece is converted to it before it moves; the result has this dtype. Default: input's.
  std::optional<DType> forward_dtype;
  // The gradient is converted to it before its collectives and to the input's dtype after them.
  // Default: the input's dtype (so with only forward_dtype set, the backward moves in the input's dtype).
  std::optional<DType> backward_dtype;
};

// The differentiable op: a DTensor with spec `dst` holding the same global value as the DTensor
// `input`. Same-spec calls return a new handle over the same local tensor (no communication).
// Throws kInvalidArgument for illegal transitions (see PlanRedistribute) naming both specs.
Tensor Redistribute(const Tensor& input, const DTensorSpec& dst, const RedistributeOptions& options = {});

}  // namespace tessel::dtensor
