// fsdp/fsdp_param.h — FsdpMeshInfo (which mesh axes FSDP shards and replicates over) and FsdpParam: one
// parameter's sharded-state machine (sharded DTensor <-> unsharded tensor) and its slice of the group's
// flat all-gather / reduce-scatter buffers.
//
// Invariant: the sharded parameter is a leaf DTensor whose local tensor is a contiguous view of the first
// `local_size` slices (along the shard dim) of a zero-padded flat storage of exactly padded_shard_numel()
// elements, so every rank contributes the same number of elements to the group's all-gather (one even
// collective), and the padding is always zero. The unsharded parameter is one stable leaf tensor for the
// lifetime of the FsdpParam; resharding frees its bytes (Storage::UnsafeFreeBytes) instead of dropping the
// handle, so tensors autograd saved in forward see the data again once backward re-all-gathers it.
//
// [Note: FSDP layout] (referenced from param_group.h and collectives.h)
// FSDP shards the *unsharded local* tensor U of a parameter on dim 0 like torch.chunk over the shard
// axis (W ranks): chunk = ceil(U.size(0) / W) rows, rank j holds rows [j * chunk, min((j+1) * chunk, n)).
// U is the parameter itself, or for a tensor-parallel DTensor parameter its TP-local tensor (FSDP on
// top of TP: the sharded spec lists TP's axes first, then the FSDP axis, in dim 0's shard order).
// Each rank stores chunk * row_numel elements (its rows, then zero rows). In the group's flat buffers a
// rank's block is the concatenation of its padded shards in parameter order, so the all-gather output
// is [rank 0 block | rank 1 block | ...] and parameter p's rows of rank j start at
// j * group_shard_numel + offset(p). Example, W = 2, params a [3, 2] and b [1, 2] (row_numel 2):
//   chunk(a) = 2, chunk(b) = 1, group_shard_numel = 4 + 2 = 6
//   rank 0 block: a rows 0-1, b row 0        rank 1 block: a row 2, zero row, b zero row
// Shard(d) for d > 0 (FullyShardOptions::shard_placement_fn, PyTorch's): rank j holds the slices
// [j * chunk, (j + 1) * chunk) of U's dim d, chunk = U.size(d) / W exactly (uneven sizes are rejected, as in
// PyTorch), stored contiguously; its block in the flat buffers is that contiguous shard, so the collectives
// are the same and only the copy-out (a strided copy into the unsharded parameter, torch.cat along d) and
// the gradient fold (the strided slices of the gradient, torch's chunk_cat) change. Example, W = 2, c [2, 4]
// on Shard(1): rank 0 holds [[c00, c01], [c10, c11]], rank 1 [[c02, c03], [c12, c13]].
//
// Example:
//   FsdpParam p(module, {"attn.wq.weight"}, module->Param(...), mesh_info, mp);
//   p.ToSharded();                        // module now sees the Shard(0) DTensor
//   p.AllocateUnsharded(); p.CopyOutFrom(all_gather_output, offset, group_numel); p.ToUnsharded();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "core/nn/module.h"
#include "core/tensor/tensor.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor_spec.h"
#include "fsdp/policies.h"

namespace tessel::fsdp {

// The FullyShard mesh and the axes FSDP uses on it: `shard_axis` shards each parameter's shard dim (0
// unless shard_placement_fn says otherwise), `replicate_axis` (HSDP) holds full copies of the shards;
// every other axis belongs to tensor parallelism (the parameters' own DTensor meshes). shard_axis
// kNoShardAxis (only with a replicate_axis) is torch's DDPMeshInfo (replicate_with_fsdp): every rank holds
// whole parameters (Replicate on every FSDP axis), the "shard group" is `self_group` (this rank alone, so
// the all-gather and reduce-scatter are local copies) and gradients are all-reduced over replicate_axis.
struct FsdpMeshInfo {
  static constexpr int kNoShardAxis = -1;
  dtensor::DeviceMesh mesh;
  int shard_axis = 0;
  std::optional<int> replicate_axis;
  comm::ProcessGroupPtr self_group;  // set when shard_axis == kNoShardAxis
  // The mesh the caller passed when FSDP joined it to the parameters' TP mesh (torch's fully_shard(m,
  // mesh["dp"]) over TP DTensors): plain parameters live on it, as torch places them. Unset: `mesh`.
  std::optional<dtensor::DeviceMesh> plain_mesh;

  bool has_shard_axis() const { return shard_axis != kNoShardAxis; }
  const comm::ProcessGroupPtr& shard_group() const {
    return has_shard_axis() ? mesh.axis_group(shard_axis) : self_group;
  }
  const comm::ProcessGroupPtr& replicate_group() const { return mesh.axis_group(*replicate_axis); }
  int64_t shard_size() const { return has_shard_axis() ? mesh.size(shard_axis) : 1; }
  int64_t shard_rank() const { return has_shard_axis() ? mesh.local_rank(shard_axis) : 0; }
  // For messages: the shard axis's name, or "(none: replicate only)".
  std::string shard_axis_name() const {
    return has_shard_axis() ? mesh.axis_names()[static_cast<size_t>(shard_axis)] : "(none: replicate only)";
  }
  bool is_hsdp() const { return replicate_axis.has_value(); }
};

class FsdpParam {
 public:
  // `module` is the module FullyShard was called on; `fqns` the parameter's names relative to it (more
  // than one when a tensor is registered twice, e.g. tied weights). Shards `param` (copies this rank's
  // rows) and leaves the module pointing at the sharded DTensor.
  // `shard_dim`: the dim of U FSDP shards ([Note: FSDP layout]).
  // REQUIRES: param contiguous with dim >= 1, 0 <= shard_dim < dim, U.size(shard_dim) divisible by the shard
  // axis size when shard_dim > 0 (FullyShard checks these and names the FQN).
  FsdpParam(nn::Module* module, std::vector<std::string> fqns, const Tensor& param, const FsdpMeshInfo& mesh_info,
            const MixedPrecisionPolicy& mp, int64_t shard_dim = 0);
  ~FsdpParam();
  FsdpParam(const FsdpParam&) = delete;
  FsdpParam& operator=(const FsdpParam&) = delete;

  // The live FsdpParam (of any fully_shard group of this process) that was built from `t` or whose sharded
  // parameter `t` is, with the type of the module it belongs to; null when none. A tensor shared between
  // two groups that neither nests the other (ALBERT-style weights shared by sibling layers) would become
  // two independent shards, each stepped with its own module's gradient only: FullyShard rejects it.
  static const FsdpParam* FindOwnerOf(const Tensor& t, std::string* module_type);

  const std::string& fqn() const { return display_fqn_; }
  void set_display_fqn(std::string fqn) { display_fqn_ = std::move(fqn); }
  const std::vector<std::string>& fqns() const { return fqns_; }
  // The module `fqns` are relative to (for fully_shard on a list: the list's module that registers it).
  nn::Module* module() const { return module_; }
  // The tensor is also registered as `fqn` of `module`, another module of the same fully_shard list
  // (weights tied across the list's modules): it is pointed at the sharded / unsharded tensor too.
  void AddOwner(nn::Module* module, std::string fqn) { other_owners_.emplace_back(module, std::move(fqn)); }
  // True when `t` is the tensor this parameter was built from (tensors shared across groups are an error).
  bool WasBuiltFrom(const Tensor& t) const { return !original_.expired() && original_.lock().get() == t.impl(); }
  const Tensor& sharded_param() const { return sharded_param_; }
  // Defined once the first unshard created it (its bytes may be freed).
  const Tensor& unsharded_param() const { return unsharded_param_; }
  // Live: the sharded parameter's flag, which the user may change after fully_shard (freezing, unfreezing).
  bool requires_grad() const { return sharded_param_.requires_grad(); }
  DType orig_dtype() const { return orig_dtype_; }
  DType param_dtype() const { return param_dtype_; }
  DType reduce_dtype() const { return reduce_dtype_; }
  // Elements this parameter contributes to one rank's block of the flat buffers (chunk * slice_numel).
  int64_t padded_shard_numel() const { return chunk_ * slice_numel_; }
  // The dim of U FSDP shards, and this rank's extent along it (its rows for dim 0; 0 for empty trailing ranks).
  int64_t shard_dim() const { return dim_; }
  int64_t local_size() const { return local_size_; }

  // torch's FSDPParam.reset_sharded_param: after the sharded parameter's data was replaced in place
  // (Module.to(dtype) sets `param.data` to a cast DTensor), its local tensor becomes a view of a zero-padded
  // flat storage again, in the new dtype, and the dtypes that follow the parameter's follow it (the all-gather's
  // unless the MixedPrecisionPolicy names one, the reduce's likewise). No-op when the data is the one it
  // holds. kInvalidArgument when the new local tensor has another shape, kFailedPrecondition while the
  // unsharded bytes are allocated (only between iterations, resharded).
  void ResetShardedParam();
  // Points every FQN of the module at the sharded DTensor / the unsharded tensor.
  void ToSharded();
  void ToUnsharded();

  // --- all-gather side ---
  // Copy-in: this rank's padded shard, cast to the param dtype, into `flat_input` at `offset`.
  void CopyShardInto(const Tensor& flat_input, int64_t offset) const;
  // (Re)allocates the unsharded bytes under the params ledger; creates the unsharded leaf the first time.
  void AllocateUnsharded();
  void FreeUnsharded();
  bool unsharded_allocated() const { return unsharded_allocated_; }
  // Copy-out: every rank's chunk from the all-gather output into the unsharded parameter. Does not bump
  // the unsharded tensor's version (tensors saved for backward stay valid).
  void CopyOutFrom(const Tensor& all_gather_output, int64_t offset, int64_t group_shard_numel);
  // World size 1: the unsharded parameter is the (cast) shard itself.
  void CopyShardToUnsharded();
  // Copy of rank j's padded rows of the unsharded parameter (chunk j, padding included, param dtype) into
  // `flat` at `offset`: the post-forward piece of reshard_after_forward=<int> (ParamGroup).
  // REQUIRES: unsharded_allocated().
  void CopyUnshardedChunkInto(int64_t j, const Tensor& flat, int64_t offset) const;

  // --- reduce-scatter side ---
  // The gradient autograd accumulated on the unsharded parameter as a dense local tensor (a TP DTensor
  // gradient is first redistributed to the parameter's TP placements), or undefined.
  Tensor TakeUnshardedGrad();
  // Forgets the gradient autograd accumulated on the unsharded parameter (an aborted iteration's: it must not
  // reach the next reduction). No collective.
  void DropUnshardedGrad() {
    if (unsharded_param_.defined()) unsharded_param_.set_grad(Tensor());
  }
  // kFailedPrecondition when a module this parameter belongs to no longer holds its sharded or unsharded handle
  // (the user assigned another parameter after fully_shard, which the next unshard would silently undo).
  void CheckStillRegistered() const;
  // Built under tessel.device("meta") and not yet materialized (to_empty): its shard holds no values.
  bool on_meta() const;
  // Writes (or adds, when `accumulate`) `grad` in the rank-major layout of [Note: FSDP layout] into the
  // flat reduce-scatter input; writes zero padding when not accumulating.
  void FoldGradInto(const Tensor& grad, const Tensor& flat_input, int64_t offset, int64_t group_shard_numel,
                    bool accumulate) const;
  // This rank's reduced slices at `offset` of `flat_output` become (or are added to) the sharded .grad, a
  // DTensor with the sharded parameter's placements (Shard(shard_dim) on the FSDP axis), original dtype.
  // Returns true when the .grad is a view of flat_output.
  bool SetShardedGradFrom(const Tensor& flat_output, int64_t offset);

 private:
  // A contiguous view of `n` slices along the shard dim (U's shape with size(dim) = n) at `offset` of flat.
  Tensor LocalView(const Tensor& flat, int64_t offset, int64_t n) const;
  // The unsharded parameter's bytes as a contiguous tensor of U's shape.
  Tensor UnshardedLocal() const;
  void SetModuleParam(const Tensor& value);
  // The original dtype and the all-gather / reduce dtypes that follow it unless the policy names them.
  void SetDTypes(DType orig);
  // sharded_storage_ = a zero-padded flat [padded_shard_numel()] of `like`'s dtype and device (params ledger) whose
  // first local_size_ slices are rows() (not called when there are none, or when `like` is deferred: meta).
  void StoreShard(const Tensor& like, const std::function<Tensor()>& rows);
  // The mesh the sharded parameter lives on, as torch's FSDPParam places it: a TP DTensor's is the FSDP mesh
  // (FSDP's axes joined to TP's); a plain parameter's is the mesh the caller passed (FsdpMeshInfo::plain_mesh,
  // mesh["dp"]), not the joint one with Replicate on the TP axes. Its collectives are the same either way.
  const dtensor::DeviceMesh& param_mesh() const {
    return tp_spec_ || !mesh_info_.plain_mesh ? mesh_info_.mesh : *mesh_info_.plain_mesh;
  }

  nn::Module* module_;
  std::vector<std::string> fqns_;
  std::vector<std::pair<nn::Module*, std::string>> other_owners_;
  std::weak_ptr<TensorImpl> original_;
  std::string display_fqn_;
  FsdpMeshInfo mesh_info_;
  DType orig_dtype_, param_dtype_, reduce_dtype_;
  std::optional<DType> mp_param_dtype_, mp_reduce_dtype_;  // the MixedPrecisionPolicy's (ResetShardedParam)
  // U, the tensor FSDP shards (see the note): shape, the sharded dim, its size, the elements of one index
  // along it (U.numel() / U.size(dim) when not empty), slices per rank (padded), this rank's slices.
  Shape unsharded_shape_;
  int64_t dim_ = 0, dim_size_ = 0, slice_numel_ = 1, chunk_ = 0, local_size_ = 0;
  // Tensor parallelism underneath (unset for plain parameters): the unsharded parameter is a DTensor
  // with this spec (dtype = param dtype) on this mesh.
  std::optional<dtensor::DTensorSpec> tp_spec_;
  std::optional<dtensor::DeviceMesh> tp_mesh_;

  Tensor sharded_storage_;  // flat [padded_shard_numel], orig dtype, zero padding
  Tensor sharded_param_;    // leaf DTensor over a view of sharded_storage_
  std::optional<dtensor::DTensorSpec> sharded_spec_;
  Tensor unsharded_flat_;   // flat [W * padded_shard_numel], param dtype; bytes freed when resharded
  Tensor unsharded_param_;  // leaf: a view of unsharded_flat_ (or a TP DTensor over it)
  bool unsharded_allocated_ = false;
  bool swapped_in_ = false;  // the module's original handle has been replaced by this FsdpParam's
};

}  // namespace tessel::fsdp
