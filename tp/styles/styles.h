// tp/styles/styles.h — internal to tp/: how each ParallelStyle is applied to one module, and the input /
// output conversions the styles share (PyTorch's _prepare_input_fn / _prepare_output_fn).
//
// Invariant: every hook a style registers names the module's FQN and style in its errors; an input that is
// already a DTensor is never re-annotated but redistributed to the desired layout, or else the declared one
// (torch's styles); a plain input becomes a DTensor with the declared layout (DTensor::FromLocal, no
// communication), and only the redistribute to the desired layout communicates.
//
// Example (what ColwiseParallel's pre-hook does):
//   inputs[0] = PrepareInput(inputs[0], Replicate{}, Replicate{}, mesh, "ColwiseParallel on 'fc'");
#pragma once

#include <optional>
#include <string>

#include "core/nn/module.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "tp/distribute_module.h"
#include "tp/parallel_style.h"

namespace tessel::tp::internal {

// Shard(d) with d < 0 counted from the end of an `ndim`-dim tensor; other placements unchanged.
// REQUIRES: -ndim <= d < ndim (kInvalidArgument naming `who` and the dims otherwise).
Placement Normalize(const Placement& p, int64_t ndim, const std::string& who);

// `x` annotated with `layout` (plain: FromLocal, optionally with the global `shape`; DTensor: checked),
// then redistributed to `desired` when given and different.
dtensor::DTensor PrepareInput(const Tensor& x, const Placement& layout, const std::optional<Placement>& desired,
                              const DeviceMesh& mesh, const std::string& who,
                              const std::optional<Shape>& shape = std::nullopt);
// `y` (a DTensor, or a plain tensor annotated with `layout`) redistributed to `desired`, then its local
// shard when `use_local`.
Tensor PrepareOutput(const Tensor& y, const std::optional<Placement>& layout, const Placement& desired, bool use_local,
                     const DeviceMesh& mesh, const std::string& who);

// Forward pre-hook / forward hook of PrepareModuleInput / PrepareModuleOutput on `module`; their collectives carry
// `label` (DistributeModuleOptions::collective_label).
// REQUIRES: layouts.size() == desired.size(); desired[i] only where layouts[i] (kInvalidArgument).
void RegisterInputHook(nn::Module& module, const Layouts& layouts, const Layouts& desired, bool use_local,
                       const DeviceMesh& mesh, const std::string& who, const std::string& label);
void RegisterOutputHook(nn::Module& module, const Layouts& layouts, const Layouts& desired, bool use_local,
                        const DeviceMesh& mesh, const std::string& who, const std::string& label);

// "ColwiseParallel on 'layers.0.attn.wq' (Linear)"
std::string Who(const std::string& style, const std::string& fqn, const nn::Module& module);

void Apply(const ColwiseParallel& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options);
void Apply(const RowwiseParallel& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options);
void Apply(const SequenceParallel& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options);
void Apply(const PrepareModuleInput& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options);
void Apply(const PrepareModuleOutput& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options);
void Apply(const PrepareModuleInputOutput& style, nn::Module& module, const std::string& fqn, const DeviceMesh& mesh,
           const DistributeModuleOptions& options);

}  // namespace tessel::tp::internal
