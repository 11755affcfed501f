// core/nn/checkpoint_wrapper.h — activation checkpointing applied to a module, in place.
//
// CheckpointWrapper is the module-level face of autograd::Checkpoint ([Note: activation
// checkpointing] in core/autograd/checkpoint.h): once applied, every Call of the module runs its
// Forward inside Checkpoint, so backward recomputes the module's forward instead of keeping what it
// saved. Full: only the module's inputs are kept. Selective: the outputs of the ops the policy names are
// kept as well.
//
// Why in place and not torch's wrapping module: torch's checkpoint_wrapper inserts a child
// "_checkpoint_wrapped_module" and strips it from state-dict keys with hooks. Here the module object
// stays where it is (the wrapper is a ModuleState plus Module's forward wrapper, like torch's composable
// checkpoint()), so FQNs, state dicts and fully_shard / parallelize_module plans see exactly the same
// names with and without checkpointing.
//
// Invariant: with or without CheckpointWrapper a module gives bitwise the same outputs and
// gradients (given its Generators in the options); hooks of the module itself (fully_shard applied
// after, the documented order) run once per forward outside the recomputed region; hooks of its
// children run again during the recompute.
//
// Example (torchtitan's order: TP, then checkpointing, then fully_shard per block):
//   for (size_t i = 0; i < gpt.layers().size(); ++i) ApplyActivationCheckpointing(*gpt.layers().at(i), "full");
//   ApplyActivationCheckpointing(block, autograd::CheckpointOptions{.save_outputs =
//   autograd::SaveOutputsOf({"linear"})});
#pragma once

#include <string>

#include "core/autograd/checkpoint.h"
#include "core/nn/module.h"

namespace tessel::nn {

class CheckpointWrapper final : public ModuleState {
 public:
  static constexpr const char* kKey = "checkpoint_wrapper";
  explicit CheckpointWrapper(autograd::CheckpointOptions options) : options_(std::move(options)) {}
  static CheckpointWrapper* Of(const Module& module);  // nullptr when not applied
  const autograd::CheckpointOptions& options() const { return options_; }

 private:
  autograd::CheckpointOptions options_;
};

// Applies checkpointing to `module` (kFailedPrecondition if already applied, or if the module already
// has another forward wrapper). Returns the module.
Module& ApplyActivationCheckpointing(Module& module, autograd::CheckpointOptions options = {});
// By name, as the main job's --ac flag spells it: "full" (inputs only), "selective" (Korthikanti et
// al.: only the attention core is recomputed; planner/'s kSelective), "gemm" (keep the outputs of
// linear / matmul, recompute the rest; inside the region the GELU MLP's fused linear_gelu runs as
// linear then gelu, so only the pre-activation is kept and gelu is recomputed, as before the fusion).
// kInvalidArgument on other names ("none" applies nothing).
Module& ApplyActivationCheckpointing(Module& module, const std::string& policy);
// checkpoint_wrapper(module): full checkpointing.
inline Module& checkpoint_wrapper(Module& module) { return ApplyActivationCheckpointing(module); }

// The options behind "full", "selective" or "gemm" (kInvalidArgument otherwise).
autograd::CheckpointOptions CheckpointOptionsFor(const std::string& policy);

// Removes checkpointing from `module` (no-op when not applied).
void RemoveActivationCheckpointing(Module& module);

}  // namespace tessel::nn
