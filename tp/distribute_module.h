// tp/distribute_module.h — DistributeModule: the general form every ParallelStyle is built from, as
// torch.distributed.tensor.distribute_module: partition the parameters onto a mesh, and convert the
// module's inputs and outputs with forward hooks.
//
// Invariant: after DistributeModule every parameter of `module` (recursively) is a DTensor on `mesh`:
// `partition_fn` decides the layout of the ones it replaces, and every parameter it leaves plain is
// replicated (DistributeTensor with Replicate, or broadcast from src_data_rank). A module is distributed
// at most once (kFailedPrecondition on the second call, as PyTorch), and never after fully_shard.
//
// Example:
//   DistributeModule(linear, tp_mesh,
//       [](const std::string& name, nn::Module& m, const DeviceMesh& mesh) {
//         if (m.HasParam("weight")) m.SetParameter("weight",
//             dtensor::DistributeTensor(m.Param("weight"), mesh, {dtensor::Shard{0}}));
//       },
//       [](nn::Module&, TensorList& inputs, const DeviceMesh& mesh) {
//         inputs[0] = dtensor::DTensor::FromLocal(inputs[0], mesh, {dtensor::Replicate{}});
//       },
//       [](nn::Module&, TensorList& outputs, const DeviceMesh&) {
//         outputs[0] = dtensor::DTensor(outputs[0]).ToLocal();
//       });
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "comm/collective.h"
#include "core/nn/module.h"
#include "dtensor/device_mesh.h"
#include "dtensor/placement.h"

namespace tessel::tp {

using dtensor::DeviceMesh;

// Called for every (fqn relative to `module`, submodule) pair, pre-order, `module` itself first ("").
using PartitionFn = std::function<void(const std::string& name, nn::Module& module, const DeviceMesh& mesh)>;
// Forward pre-hook: may rewrite the positional inputs.
using InputFn = std::function<void(nn::Module& module, TensorList& inputs, const DeviceMesh& mesh)>;
// Forward hook: may rewrite the outputs.
using OutputFn = std::function<void(nn::Module& module, TensorList& outputs, const DeviceMesh& mesh)>;

struct DistributeModuleOptions {
  // When set, plain parameters take this rank's values, broadcast over the group first (PyTorch's
  // src_data_rank: a rank within `mesh`, which is 1-D, not a global rank); by default each rank cuts its Shard pieces from its own
  // values and Replicate parameters are broadcast from the mesh's first rank.
  std::optional<int> src_data_rank;
  // Labels the collectives the input and output functions issue (comm::CollectiveLabel; parallelize_module sets
  // "tp '<fqn>'"): a mismatch names the module, and ranks running different modules fail there. Empty: none.
  std::string collective_label;
};

// Any of the three functions may be empty. Returns `module`.
// REQUIRES: DistributeModule was not applied to `module` before; `module` is not fully_shard'ed.
nn::Module& DistributeModule(nn::Module& module, const DeviceMesh& mesh, const PartitionFn& partition_fn = nullptr,
                             const InputFn& input_fn = nullptr, const OutputFn& output_fn = nullptr,
                             const DistributeModuleOptions& options = {});

// Replaces `module`'s own parameter `name` by DistributeTensor(value, mesh, {placement}) (a no-op for a
// parameter that is already a DTensor with that layout). For partition functions.
void DistributeParameter(nn::Module& module, const std::string& name, const DeviceMesh& mesh,
                         const dtensor::Placement& placement, const DistributeModuleOptions& options = {});

// True when `module` carries fully_shard's state (tp/ must not include fsdp/: the key is the contract).
bool IsFullyShardedModule(const nn::Module& module);

namespace internal {

// Runs `fn` with `label` as this thread's collective label (comm::CollectiveLabel); with none when it is empty.
template <typename Fn>
void LabelledCall(const std::string& label, Fn&& fn) {
  if (label.empty()) {
    fn();
    return;
  }
  comm::CollectiveLabel scope(label);
  fn();
}

}  // namespace internal

}  // namespace tessel::tp
