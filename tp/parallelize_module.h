// tp/parallelize_module.h — ParallelizeModule: tensor parallelism on a module tree from a plan of
// FQN patterns -> ParallelStyle, as torch.distributed.tensor.parallel.parallelize_module.
//
// Composition order (DESIGN.md, torchtitan): pipeline split -> tensor parallelism (this) -> activation
// checkpointing -> fully_shard per block bottom-up, root last. ParallelizeModule on a module any of whose
// submodules is already fully_shard'ed raises kFailedPrecondition.
//
// Invariant: every plan entry matches at least one submodule (kInvalidArgument naming the pattern and
// what exists where matching stopped), entries apply in plan order, each matched module in pre-order;
// a pattern is a dotted FQN whose atoms may use '*' (and '?', '[...]') wildcards matched per atom
// (fnmatch), so "layers.*.attn.wq" matches one module per block and "*" only direct children; the pattern ""
// is the module itself (torch's shortcut: a root PrepareModuleInput / PrepareModuleOutput in the same plan).
// The mesh is 1-D, or has an axis named `tp_axis` (the styles run on mesh[tp_axis]).
//
// Example (Megatron MLP):
//   ParallelizeModule(block, mesh, {{"mlp.fc", ColwiseParallel{}}, {"mlp.proj", RowwiseParallel{}}});
//   // forward: one all_reduce (proj's Partial output); backward: one all_reduce (fc's input gradient)
//   ParallelizeModule(linear, mesh, ColwiseParallel{});   // one style for the module itself
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/nn/module.h"
#include "dtensor/device_mesh.h"
#include "tp/parallel_style.h"

namespace tessel::tp {

using ParallelizePlan = std::vector<std::pair<std::string, ParallelStyle>>;

struct ParallelizeOptions {
  // The mesh axis tensor parallelism runs on when the mesh has more than one axis.
  std::string tp_axis = "tp";
  // Partition the parameters of this rank of the tensor-parallel group (PyTorch's src_data_rank: a group
  // rank, so 0 is each TP group's first rank on a (dp, tp) mesh): its whole tensor is broadcast over the
  // group first. Unset (PyTorch's default is 0): each rank cuts its Shard pieces from its own values, and
  // Replicate parameters (row-parallel biases, sequence-parallel norms) still take the group's first rank's
  // values by one broadcast each, so ranks must start from the same values (the same seed).
  std::optional<int> src_data_rank;
  // The single-style overload: `module`'s path in its model ("layers.0.mlp.fc"), which its errors and collective
  // labels name (the Python face applies each matched module's style through that overload). Empty: the root.
  std::string fqn;
};

// REQUIRES: `module` and its submodules are not fully_shard'ed; no module takes two partitioning styles.
nn::Module& ParallelizeModule(nn::Module& module, const dtensor::DeviceMesh& mesh, const ParallelizePlan& plan,
                              const ParallelizeOptions& options = {});
nn::Module& ParallelizeModule(nn::Module& module, const dtensor::DeviceMesh& mesh, const ParallelStyle& style,
                              const ParallelizeOptions& options = {});

// The 1-D tensor-parallel mesh: `mesh` itself when 1-D, else mesh[tp_axis] (kInvalidArgument naming the
// axis and the mesh's axes when it has none of that name).
dtensor::DeviceMesh TensorParallelMesh(const dtensor::DeviceMesh& mesh, const std::string& tp_axis);

// FQNs (relative to `root`) of the submodules `pattern` matches, pre-order; empty when none; {""} (the root) for "".
std::vector<std::string> MatchModules(nn::Module& root, const std::string& pattern);

// PrepareModuleInput's treatment of one input, the one its hook applies and the Python face's with_kwargs
// hook calls for every positional and keyword argument (so tensors among non-tensor arguments pair with
// their layouts as torch's): `layout` unset passes `x` as it is; else a plain `x` becomes a DTensor with
// `layout` (a DTensor keeps its own), is moved to `desired` (else `layout`) and returned local when
// `use_local`. `who` names the module and input in errors.
Tensor PrepareModuleInputValue(const Tensor& x, const std::optional<Placement>& layout,
                               const std::optional<Placement>& desired, bool use_local,
                               const dtensor::DeviceMesh& mesh, const std::string& who);
// kInvalidArgument unless `desired` pairs with `layouts`: as many entries, and none where the layout is unset.
void CheckPrepareInputLayouts(const Layouts& layouts, const Layouts& desired, const std::string& who);

}  // namespace tessel::tp
