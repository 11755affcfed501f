// tp/distribute_module.cc — DistributeModule: partition, replicate the rest, register the hooks.
#include "tp/distribute_module.h"

#include <memory>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "dtensor/dtensor.h"

namespace tessel::tp {
namespace {

// Marks a module DistributeModule has run on (PyTorch's _distribute_module_applied).
constexpr const char* kStateKey = "distribute_module";
// fully_shard's composable-state key (fsdp/state.h FsdpState::kKey; tp/ may not include fsdp/).
constexpr const char* kFullyShardKey = "fully_shard";

class DistributedState final : public nn::ModuleState {};

}  // namespace

bool IsFullyShardedModule(const nn::Module& module) { return module.GetComposableState(kFullyShardKey) != nullptr; }

void DistributeParameter(nn::Module& module, const std::string& name, const DeviceMesh& mesh,
                         const dtensor::Placement& placement, const DistributeModuleOptions& options) {
  const Tensor& current = module.Param(name);
  if (!current.defined()) return;
  if (current.is_distributed()) {
    const dtensor::DTensor d(current);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition,
                      d.mesh() == mesh && d.placements().size() == 1 && d.placements()[0] == placement,
                      "DistributeModule: parameter '", name, "' of a ", module.type_name(), " is already a DTensor ",
                      dtensor::PlacementsToString(d.placements()), " on ", d.mesh().ToString(), "; wanted [",
                      dtensor::ToString(placement), "] on ", mesh.ToString(),
                      " (tensor parallelism must come before fully_shard, and a parameter is partitioned once)");
    return;
  }
  NoGradGuard no_grad;
  memory::LedgerScope ledger(memory::Ledger::kParams);
  dtensor::DistributeOptions opts;
  if (options.src_data_rank) {
    // PyTorch's src_data_rank is a rank of the tensor-parallel group (mesh_scatter / mesh_broadcast's
    // group_src), so 0 names each TP group's first rank on a (dp, tp) mesh; DistributeTensor takes a
    // global rank.
    const std::vector<int>& ranks = mesh.topology().ranks();
    TESSEL_CHECK(*options.src_data_rank >= 0 && *options.src_data_rank < static_cast<int>(ranks.size()),
                 "DistributeModule: src_data_rank ", *options.src_data_rank, " is not a rank of the ", ranks.size(),
                 "-rank tensor-parallel mesh ", mesh.ToString(), " (it counts within the group, as in PyTorch)");
    opts.src_rank = ranks[static_cast<size_t>(*options.src_data_rank)];
  }
  dtensor::DTensor d = dtensor::DistributeTensor(current, mesh, {placement}, opts);
  if (current.requires_grad()) d.set_requires_grad(true);
  module.SetParameter(name, d.tensor());
}

nn::Module& DistributeModule(nn::Module& module, const DeviceMesh& mesh, const PartitionFn& partition_fn,
                             const InputFn& input_fn, const OutputFn& output_fn,
                             const DistributeModuleOptions& options) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, module.GetComposableState(kStateKey) == nullptr,
                    "DistributeModule: this ", module.type_name(),
                    " was already distributed (a module takes one ParallelStyle that partitions parameters)");
  TESSEL_CHECK(mesh.ndim() == 1, "DistributeModule: tensor parallelism takes a 1-D mesh, got ", mesh.ToString(),
               "; pass mesh[\"tp\"]");
  for (auto& [name, m] : module.NamedModules()) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !IsFullyShardedModule(*m), "DistributeModule: submodule '", name,
                      "' (a ", m->type_name(),
                      ") is already fully_shard'ed; apply tensor parallelism before fully_shard (order: pipeline "
                      "split -> TP -> activation checkpointing -> fully_shard)");
  }
  for (auto& [name, m] : module.NamedModules()) {
    if (partition_fn) partition_fn(name, *m, mesh);
    for (auto& [pname, p] : m->NamedParameters(/*recurse=*/false)) {
      if (!p.is_distributed()) DistributeParameter(*m, pname, mesh, dtensor::Replicate{}, options);
    }
  }
  const std::string label = options.collective_label;
  if (input_fn) {
    module.RegisterForwardPreHook([input_fn, mesh, label](nn::Module& m, TensorList& inputs) {
      internal::LabelledCall(label, [&] { input_fn(m, inputs, mesh); });
    });
  }
  if (output_fn) {
    module.RegisterForwardHook([output_fn, mesh, label](nn::Module& m, const TensorList&, TensorList& outputs) {
      internal::LabelledCall(label, [&] { output_fn(m, outputs, mesh); });
    });
  }
  module.SetComposableState(kStateKey, std::make_unique<DistributedState>());
  return module;
}

}  // namespace tessel::tp
