// pipelining/pipeline_gpt.h — the whole pipeline recipe for one rank (torchtitan's pipeline_llm): split
// the GPT (PipelineGPT) or any model by module names (PipelineModel) into stages, keep this rank's stages, wrap
// them in PipelineStages, generate and lower the schedule, and build the executor.
//
// Composition order (DESIGN.md): call this first; apply tensor parallelism, activation checkpointing and
// fully_shard to each of `modules` afterwards (before the first Step: the executor then gathers each stage once per
// step and reduces it once, executor.h), then build the optimizer over NamedParameters().
//
// Invariant: the stages of all ranks together hold every parameter of GPT(cfg) exactly once, with its
// FQN and its initial value for `seed`; stage s lives on rank StageToRankMap(kind, p, n)[s].
//
// Example:
//   RankPipeline pp = PipelineGPT(cfg, /*seed=*/0, pg, {.kind = ScheduleKind::k1F1B, .num_microbatches = 4},
//                                 nn::TokenCrossEntropy);
//   optim::AdamW opt(pp.NamedParameters(), {});
//   StepStats st = pp.executor->Step(idx_BT, targets_BT);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "core/nn/transformer.h"
#include "pipelining/executor.h"
#include "pipelining/lowering.h"
#include "pipelining/microbatch.h"
#include "pipelining/model_split.h"
#include "pipelining/schedules.h"
#include "pipelining/stage.h"

namespace tessel::pipelining {

struct PipelineOptions {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int num_microbatches = 1;
  // Stages per rank (PipelineGPT; PipelineModel takes the number of stages from its module lists); 0 picks 1 for
  // GPipe and 1F1B, 2 for every other schedule (V schedules need 2).
  int stages_per_rank = 0;
  LowerOptions lower;
  // The loss's denominator per microbatch (ExecutorOptions::loss_denominator). The default matches the
  // default loss, nn::TokenCrossEntropy: targets other than -100 (cross-entropy's ignore_index); for
  // unmasked targets it gives the row weights.
  std::function<int64_t(const Tensor& targets)> loss_denominator = [](const Tensor& t) { return CountNotIgnored(t); };
};
using PipelineGPTOptions = PipelineOptions;

struct RankPipeline {
  std::vector<int> stage_to_rank;  // index = stage
  int num_stages = 0;
  Program lowered;                 // every rank's lowered program (verified)
  std::vector<std::unique_ptr<nn::Module>> modules;       // this rank's stage modules, increasing stage
  std::vector<std::unique_ptr<PipelineStage>> stages;     // one per module
  std::unique_ptr<PipelineExecutor> executor;
  // Parameters of this rank's stages, full-model FQNs.
  nn::StateDict NamedParameters() const;
};

// Builds this rank's part. Throws kInvalidArgument when the schedule does not fit (schedules.h's table,
// e.g. ZBVZeroBubble with 3 stages per rank) or the GPT has fewer layers than stages.
RankPipeline PipelineGPT(const nn::GPTConfig& cfg, uint64_t seed, comm::ProcessGroupPtr pg,
                         const PipelineOptions& options, LossFn loss_fn = nn::TokenCrossEntropy);

// The same recipe for any model (torchtitan's pipeline_module_split + build_pipeline_schedule): `make_model` builds
// the whole model, the same on every rank (a fixed seed), and `names` lists the modules of each stage
// (PipelineModuleSplit: the stage keeps full-model FQNs; its forward must skip the children it lost). The number of
// stages is names.size(), a multiple of pg->size() that `options.kind` accepts (1 per rank for GPipe and 1F1B, 2 for
// the V schedules). `loss_fn` runs on the last stage; a loss that is a mean over all target elements (MSE) or over
// rows needs ExecutorOptions' default weights only when microbatches are even, else set options.loss_denominator.
// Compose fully_shard per stage module afterwards, as for PipelineGPT (tools/cpp_user/compose_test.cc).
//
// Example:
//   RankPipeline pp = PipelineModel([] { Generator g(5); return std::make_unique<Net>(g); },
//                                   {{"layers.0", "layers.1"}, {"layers.2", "norm", "head"}}, mesh.axis_group("pp"),
//                                   {.kind = ScheduleKind::k1F1B, .num_microbatches = 2}, MseLoss);
RankPipeline PipelineModel(const std::function<std::unique_ptr<nn::Module>()>& make_model,
                           const ModuleNamesPerStage& names, comm::ProcessGroupPtr pg, const PipelineOptions& options,
                           LossFn loss_fn);

}  // namespace tessel::pipelining
