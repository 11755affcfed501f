// dtensor/dtensor.h — DTensor: the typed handle of a distributed tensor, and the entry points that make
// one (DistributeTensor, DTensor::FromLocal) or leave one (ToLocal, FullTensor), as in PyTorch's
// torch.distributed.tensor.
//
// A DTensor is a cheap handle: copying it is a shallow copy of a Tensor whose impl is a DTensorImpl
// (dtensor_impl.h), and it converts to `const Tensor&`, so ops and autograd take it like any tensor.
// Invariant: a defined DTensor always wraps a DTensorImpl. Every entry point here is differentiable
// except DistributeTensor, which (as in PyTorch) makes a new leaf.
//
// Example (4 ranks, mesh (dp, tp) = (2, 2)):
//   DTensor w = DistributeTensor(full_w, mesh, ParsePlacements("R, S(0)"));   // one broadcast on "dp"
//   DTensor r = w.Redistribute(mesh, ParsePlacements("R, R"));               // one all_gather on "tp"
//   Tensor local = r.ToLocal();                                               // this rank's data
//   DTensor p = DTensor::FromLocal(partial_sum, mesh, ParsePlacements("P(sum), R"));
//   Tensor full = p.FullTensor();                                             // one all_reduce on "dp"
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/placement.h"
#include "dtensor/redistribute.h"
#include "dtensor/shard_order.h"

namespace tessel::dtensor {

struct FromLocalOptions {
  // Global shape and strides. Default shape: local size * number of shards per dim (even sharding, as
  // PyTorch assumes); with run_check the shape is derived from every rank's local shape instead, so
  // uneven shards work. Default strides: contiguous.
  std::optional<Shape> shape;
  std::optional<Shape> stride;
  std::optional<ShardOrder> shard_order;
  // Gather every rank's local shape and dtype (one small all_gather per mesh axis) and raise the same
  // kInvalidArgument on every rank if they are inconsistent with the placements; then, as PyTorch's, each
  // Replicate axis's rank 0 broadcasts its piece (in place when contiguous), so the replicas agree.
  bool run_check = false;
  // The placements the gradient of the local tensor is taken in (PyTorch's grad_placements): the incoming
  // gradient is redistributed to them and its local piece returned. Unset: the forward placements with
  // Partial ones read as Replicate.
  std::optional<std::vector<Placement>> grad_placements;
};

// How DistributeTensor makes the replicas of a Replicate axis equal (PyTorch's src_data_rank).
enum class ReplicaSource {
  kBroadcast,  // default (PyTorch's src_data_rank=0): the replicas take src_data_rank's values
  kCheck,      // compare a fingerprint of every rank's tensor, raise if any differ; no data moves
  kLocal,      // trust the caller: each rank keeps its own values (PyTorch's src_data_rank=None)
};

struct DistributeOptions {
  // When set, the whole tensor of this global rank is broadcast over the mesh first (one broadcast per
  // axis), so every placement takes its values; `replicas` then has nothing left to do.
  std::optional<int> src_rank;
  // kBroadcast: after slicing its Shard pieces from its own tensor, each rank's piece is broadcast over
  // each Replicate axis of size > 1 from the source's coordinate there (one broadcast per such axis).
  // kCheck: one 8-byte all_gather per mesh axis of a fingerprint (dtype, shape, bytes) of the full
  // tensor; every rank raises the same kInvalidArgument naming the ranks whose tensor differs from the
  // source's. Shard-only placements: no communication in any mode.
  ReplicaSource replicas = ReplicaSource::kBroadcast;
  // The source: this global rank of the mesh; unset, coordinate 0 on every axis (PyTorch's default
  // src_data_rank=0 is group rank 0 on each mesh dimension, so a sub-mesh works too).
  std::optional<int> src_data_rank;
  std::optional<ShardOrder> shard_order;
};

class DTensor {
 public:
  DTensor() = default;
  // REQUIRES: `t` is a DTensor (kInvalidArgument otherwise).
  explicit DTensor(Tensor t);

  // Wraps this rank's `local` shard. Differentiable: the gradient of `local` is the gradient's local
  // shard after redistributing it to `placements` (Partial ones as Replicate).
  static DTensor FromLocal(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                           const FromLocalOptions& options = {});

  bool defined() const { return tensor_.defined(); }
  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT(google-explicit-constructor): a handle view

  const DTensorSpec& spec() const;
  const std::vector<Placement>& placements() const { return spec().placements(); }
  const DeviceMesh& mesh() const;
  const Shape& shape() const { return tensor_.sizes(); }  // global
  Shape local_shape() const;
  DType dtype() const { return tensor_.dtype(); }

  // This rank's shard (aliases the DTensor's data). Differentiable: the local gradient becomes a DTensor
  // with `grad_placements` (default: this tensor's placements with Partial read as Replicate, as torch
  // 2.15: each rank's gradient of its piece of a Partial value is the whole value's gradient).
  Tensor ToLocal(std::optional<std::vector<Placement>> grad_placements = std::nullopt) const;
  // The whole global tensor on every rank (Redistribute to all-Replicate, then ToLocal); grad_placements:
  // the layout the gradient of the result is taken in (default Replicate), as torch's full_tensor.
  Tensor FullTensor(std::optional<std::vector<Placement>> grad_placements = std::nullopt) const;
  // REQUIRES: `mesh` is this tensor's mesh. Partial targets: Replicate -> P(sum) keeps the value on
  // coordinate 0 (exact; torch refuses it), Shard -> P(sum) embeds the piece in zeros (as torch),
  // -> P(avg / max / min) keeps the whole value; P(op1) -> P(op2) raises kInvalidArgument.
  // `options`: the dtypes the forward and backward collectives run in (redistribute.h).
  DTensor Redistribute(const DeviceMesh& mesh, std::vector<Placement> placements,
                       std::optional<ShardOrder> shard_order = std::nullopt,
                       const RedistributeOptions& options = {}) const;

  bool requires_grad() const { return tensor_.requires_grad(); }
  DTensor& set_requires_grad(bool requires_grad);
  // The accumulated gradient (a DTensor), or an undefined DTensor.
  DTensor grad() const;

  // "DTensor(local=[4, 8], spec=DTensorSpec(...))"
  std::string ToString() const;

 private:
  Tensor tensor_;
};

std::ostream& operator<<(std::ostream& os, const DTensor& t);

// Shards (or replicates) the full `tensor` that every rank passes: this rank keeps its piece, copied.
// Replicate axes take src_data_rank's values by default (one broadcast per Replicate axis; see
// DistributeOptions), so ranks whose tensors differ (a shared Generator raced, a rank-dependent init)
// still get equal replicas, as in PyTorch. Partial placements are rejected (kInvalidArgument). The
// result is a leaf that requires grad iff `tensor` does.
DTensor DistributeTensor(const Tensor& tensor, const DeviceMesh& mesh, std::vector<Placement> placements,
                         const DistributeOptions& options = {});

// The global shape of the DTensor whose local pieces the ranks hold as `local` under `placements` (default shard
// order): FromLocal's run_check derivation, without its replica broadcast. Collective (one small all_gather per
// mesh axis); every rank raises the same kInvalidArgument when the local shapes do not fit the placements.
Shape GlobalShapeOfLocals(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements);

}  // namespace tessel::dtensor
