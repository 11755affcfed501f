// fsdp/policies.h — the options of FullyShard: MixedPrecisionPolicy, CPUOffloadPolicy, FullyShardOptions
// (PyTorch's MixedPrecisionPolicy / CPUOffloadPolicy / fully_shard keyword arguments, same meanings).
//
// Invariant: these are plain values; FullyShard reads them once, when it builds the parameter group, and
// later changes go through the FSDPModule setters (fully_shard.h).
//
// Example:
//   FullyShardOptions opts{.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32}};
//   opts.reshard_after_forward = false;              // keep this group unsharded between forward and backward
//   opts.reshard_after_forward_size = 8;             // or: keep it sharded over 8 ranks (one host) until backward
//   opts.offload_policy = CPUOffloadPolicy{};        // accepted; a no-op while tensors live on the CPU
//   opts.ignored_params = {model.wte_weight()};      // left unsharded, its gradient unreduced
//   opts.shard_placement_fn = [](const Tensor& p) -> std::optional<dtensor::Shard> {
//     return p.dim() == 2 ? std::optional(dtensor::Shard{1}) : std::nullopt;  // columns of the matrices
//   };
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"
#include "dtensor/placement.h"

namespace tessel::fsdp {

// Mixed precision: the dtypes of the unsharded parameters, of the gradient reduction and of the outputs.
// Unset = the parameter's own dtype (no cast). The sharded parameters (what the optimizer steps) keep
// their original dtype.
struct MixedPrecisionPolicy {
  // Dtype of the all-gather and of the unsharded parameters the forward/backward compute with.
  std::optional<DType> param_dtype;
  // Dtype of the reduce-scatter (and HSDP all-reduce); the sharded .grad is cast back to the original.
  std::optional<DType> reduce_dtype;
  // Floating outputs of the module's forward are cast to this dtype (differentiably).
  std::optional<DType> output_dtype;
  // Cast floating forward inputs to param_dtype (PyTorch's default).
  bool cast_forward_inputs = true;
};

// Keep sharded parameters, gradients and optimizer state in host memory (the "offloaded" ledger) while
// computing on an accelerator. NOTE: tessel tensors live on the CPU today, so the sharded state already
// is host memory: the policy is accepted, validated and has no effect (tested as such).
struct CPUOffloadPolicy {
  bool pin_memory = true;
};

struct FullyShardOptions {
  // Free the unsharded parameters after forward (re-all-gathered in backward). Unset: true, except for
  // the root module, whose parameters would be all-gathered again right away (PyTorch's default).
  std::optional<bool> reshard_after_forward;
  // PyTorch's reshard_after_forward=<int> (set this or the bool above, not both): after forward, keep the
  // parameters sharded over groups of this many consecutive ranks of the shard axis instead of all of
  // them, so the backward all-gathers within such a group (e.g. the ranks of one host) and each rank holds
  // 1/size of the group's parameters until then. Must divide the shard axis size (kInvalidArgument
  // otherwise); 1 means reshard_after_forward = false and the axis size means true. Unlike the bool it
  // also applies to the root. Not with tensor-parallel parameters (kUnimplemented, as in PyTorch).
  std::optional<int64_t> reshard_after_forward_size;
  // The mesh axes FSDP uses, by name (fully_shard.h, "Meshes"). shard_axis: dim 0 is sharded over it;
  // replicate_axis (HSDP): gradients are all-reduced over it; replicate_axis alone is torch's
  // replicate_with_fsdp (DDP through FSDP: whole parameters, Replicate placements, gradients all-reduced).
  // Axes named by neither are treated like tensor-parallel axes: plain parameters are replicated there and
  // their gradients not reduced there.
  std::optional<std::string> shard_axis;
  std::optional<std::string> replicate_axis;
  MixedPrecisionPolicy mp_policy;
  std::optional<CPUOffloadPolicy> offload_policy;
  // PyTorch's ignored_params: parameters (matched by identity, under any name they are registered as)
  // that this call leaves as they are: not sharded, never all-gathered, their gradients not reduced
  // (each rank keeps its local gradient; reduce it yourself where the ranks must agree). Tensors that are
  // not parameters of the module are allowed (one set passed to every block's call is the usual form).
  std::vector<Tensor> ignored_params;
  // PyTorch's shard_placement_fn: called once per parameter this call manages (as the module holds it: a
  // tensor-parallel DTensor included), before anything is sharded. Shard(d) shards dim d of the parameter
  // (of its TP-local tensor; negative d counts from the end) over the shard axis; nullopt, or no function,
  // means Shard(0). d > 0 needs that dim's size to divide evenly by the shard axis size (kUnimplemented
  // otherwise, PyTorch's NotImplementedError); d outside the parameter's dims is kInvalidArgument. Uses:
  // MoE expert weights [E, ...] with fewer experts than ranks (Shard(1)), layouts a kernel wants sharded
  // by column.
  std::function<std::optional<dtensor::Shard>(const Tensor& param)> shard_placement_fn;
};

}  // namespace tessel::fsdp
