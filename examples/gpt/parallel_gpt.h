// examples/gpt/parallel_gpt.h — the GPT under any combination of pipeline, tensor and (hybrid) sharded data
// parallelism on one ParallelMesh (pp, dp_replicate, dp_shard, tp): torchtitan's pipeline_llm +
// parallelize_llama, as one recipe.
//
// The composition rule (DESIGN.md, torchtitan's order), applied by BuildParallelGpt and nowhere else:
//   1. pipeline split (pp > 1): PipelineGPT cuts the GPT into stages on the "pp" group; every stage keeps
//      its full-model FQNs and initial values;
//   2. then, for each model part (the stages of this rank, or the whole GPT when pp == 1),
//      ParallelizeGptPart: tensor parallelism on "tp" -> activation checkpointing per block (the hook in
//      the options) -> fully_shard per block bottom-up, root last, over dp_replicate / dp_shard;
//   3. pipelined stages under fully_shard run the schedule's FSDP actions: parameters are gathered once
//      per step (UNSHARD, or the first forward) and kept across microbatches (reshard after forward and
//      after backward off), gradients accumulate locally (sync off) and REDUCE_GRAD reduces them after
//      the stage's last backward: one reduce-scatter per FSDP group per step, not per microbatch;
//      RESHARD frees the parameters at the end of the step.
//
// Invariant: with the same seed and global batch, every layout trains the same function as one rank: the
// losses and final parameters match the one-rank run up to fp32 rounding (tests/comp3d_equivalence_test).
// This rank trains the rows of the global batch that belong to its data-parallel index (dp_rank).
//
// Example (8 ranks):
//   ParallelMesh pm = ParallelMesh::Build(world, {.pp = 2, .dp_shard = 2, .tp = 2});
//   ParallelGpt model = BuildParallelGpt(cfg, seed, pm, {.schedule = ScheduleKind::k1F1B, .num_microbatches = 2});
//   optim::SGD opt(model.NamedParameters(), {.lr = 0.1});
//   std::optional<double> loss = model.ForwardBackward(idx_BT, targets_BT);   // global batch
//   opt.Step(); opt.ZeroGrad();
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/state_dict.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "examples/gpt/parallel_dims.h"
#include "examples/gpt/parallelize.h"
#include "fsdp/fully_shard.h"
#include "pipelining/pipeline_gpt.h"

namespace tessel::examples {

struct ParallelGptOptions {
  // sequence_parallel works inside stages (the stage boundary is then the sequence-sharded local piece);
  // loss_parallel needs pp == 1 (a pipeline's last stage takes plain logits).
  GptParallelism tp;
  BlockHook activation_checkpointing;
  pipelining::ScheduleKind schedule = pipelining::ScheduleKind::k1F1B;
  int num_microbatches = 1;
  int stages_per_rank = 0;  // 0: PipelineGPT's default for the schedule
};

struct ParallelGpt {
  std::unique_ptr<nn::GPT> whole;                    // pp == 1
  std::optional<pipelining::RankPipeline> pipeline;  // pp > 1 (owns the stage modules)
  std::vector<nn::GPT*> parts;                       // this rank's model parts, increasing stage
  std::vector<std::vector<fsdp::FSDPModule>> fsdp;   // per part: blocks, then the root; empty without FSDP
  const ParallelMesh* mesh = nullptr;

  // Parameters of this rank's parts (full-model FQNs; DTensors under TP / FSDP).
  nn::StateDict NamedParameters() const;
  // Forward and backward of one step on the global batch (this rank takes its dp rows; pipelined, its
  // microbatches). Returns the global-batch mean loss on the ranks that compute it (pp == 1: every rank;
  // pp > 1: the last stage's ranks), after one all-reduce over the data-parallel ranks.
  std::optional<double> ForwardBackward(const Tensor& idx_BT, const Tensor& targets_BT);

  // Checkpoints. `optimizers[i]` steps parts[i] (one optimizer per part: the checkpoint accessors map an
  // optimizer to one module). The state dict aliases this rank's parameters and optimizer state under
  // full-model FQNs, which do not depend on the layout, so checkpoint::Save of it from any layout loads
  // into any other (checkpoint::Load fills the aliases in place; with pp > 1 each rank holds some FQNs
  // only: load with strict = false and require no missing keys). REQUIRES: optimizers.size() == parts.size().
  checkpoint::StateDict GetStateDict(const std::vector<optim::Optimizer*>& optimizers) const;
  // Pushes the loaded optimizer entries (steps, hyperparameters) into `optimizers`.
  void SetOptimizerStateDict(const std::vector<optim::Optimizer*>& optimizers, const checkpoint::StateDict& sd) const;
  std::vector<const nn::Module*> Modules() const;  // `parts` as modules
};

// The same for any model parts (`optimizers[i]` steps `parts[i]`; kInvalidArgument on a count mismatch).
checkpoint::StateDict GetPartsStateDict(const std::vector<const nn::Module*>& parts,
                                        const std::vector<optim::Optimizer*>& optimizers);
void SetPartsOptimizerStateDict(const std::vector<const nn::Module*>& parts,
                                const std::vector<optim::Optimizer*>& optimizers, const checkpoint::StateDict& sd);

// Builds this rank's part of the GPT (collective over the mesh's world). REQUIRES: `mesh` outlives the
// result. Throws kInvalidArgument for loss_parallel with pp > 1, a global batch whose rows do not divide
// by the data-parallel size (at ForwardBackward), and what PipelineGPT / ParallelizeGptPart throw.
ParallelGpt BuildParallelGpt(const nn::GPTConfig& cfg, uint64_t seed, const ParallelMesh& mesh,
                             const ParallelGptOptions& options);

}  // namespace tessel::examples
