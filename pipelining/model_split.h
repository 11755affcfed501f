// pipelining/model_split.h — cutting a model into pipeline stage modules by FQN boundaries (torchtitan's
// pipeline_module_split / generate_llm_fqn_per_model_part, tessel's own code).
//
// A stage is the full model with every child it does not own removed (nn::Module::RemoveChild), so the
// parameters it keeps have their full-model FQNs ("layers.2.attn.wq.weight") and, built from the same seed,
// the full model's initial values: an unpipelined and a pipelined run start identical. How a cut GPT runs
// on hidden states is [Note: GPT pipeline stages] in core/nn/transformer.h.
//
// Invariant: the module lists of all stages are disjoint and name existing modules; a stage module holds
// exactly the parameters under its listed FQNs.
//
// Example:
//   auto names = GPTStageModuleNames(cfg, /*num_stages=*/2);
//   // {{"wte", "wpe", "layers.0", "layers.1"}, {"layers.2", "layers.3", "ln_f", "lm_head"}}
//   std::unique_ptr<nn::Module> stage1 = PipelineModuleSplit(
//       [&] { Generator g(seed); return std::make_unique<nn::GPT>(cfg, g); }, names, /*stage_index=*/1);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "core/nn/transformer.h"

namespace tessel::pipelining {

// Per stage, the FQNs of the modules it owns.
using ModuleNamesPerStage = std::vector<std::vector<std::string>>;

// The layers split as evenly as possible (earlier stages take one more when uneven, like torchtitan); the
// first stage also owns wte and wpe, the last ln_f and lm_head.
// Throws kInvalidArgument when num_stages < 1 or num_stages > n_layers (a stage without layers), and
// kUnimplemented for tie_embeddings with num_stages > 1 (wte.weight would be needed on two stages; tessel
// does not synchronize a weight shared across stages).
ModuleNamesPerStage GPTStageModuleNames(const nn::GPTConfig& cfg, int num_stages);

// Builds the full model with `make_model` and removes every module stage `stage_index` does not own.
// Throws kInvalidArgument when the stage lists overlap (naming the FQN and both stages), stage_index is out
// of range, or the root module registers parameters itself (every stage would hold them); kNotFound when a
// listed FQN names no module.
std::unique_ptr<nn::Module> PipelineModuleSplit(const std::function<std::unique_ptr<nn::Module>()>& make_model,
                                                const ModuleNamesPerStage& names, int stage_index);

}  // namespace tessel::pipelining
