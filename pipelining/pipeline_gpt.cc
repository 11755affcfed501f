// pipelining/pipeline_gpt.cc — PipelineModel (and PipelineGPT on it): split, place, wrap, schedule, lower, execute.
#include "pipelining/pipeline_gpt.h"

#include "core/base/error.h"
#include "core/ops/loss.h"
#include "core/ops/view.h"
#include "core/tensor/random.h"
#include "pipelining/model_split.h"
#include "pipelining/verifier.h"

namespace tessel::pipelining {

nn::StateDict RankPipeline::NamedParameters() const {
  nn::StateDict out;
  for (const auto& m : modules) {
    for (auto& p : m->NamedParameters()) out.push_back(std::move(p));
  }
  return out;
}

RankPipeline PipelineModel(const std::function<std::unique_ptr<nn::Module>()>& make_model,
                           const ModuleNamesPerStage& names, comm::ProcessGroupPtr pg, const PipelineOptions& options,
                           LossFn loss_fn) {
  const int p = pg->size();
  TESSEL_CHECK(!names.empty() && static_cast<int>(names.size()) % p == 0, "PipelineModel: ", names.size(),
               " stage module lists for a pipeline group of ", p, " ranks: the number of stages must be a positive "
               "multiple of the ranks");
  TESSEL_CHECK(loss_fn != nullptr, "PipelineModel: the last stage needs a loss function");
  RankPipeline out;
  out.num_stages = static_cast<int>(names.size());
  const Program compute = GenerateSchedule(options.kind, p, out.num_stages, options.num_microbatches);
  out.stage_to_rank = StageToRankMap(options.kind, p, out.num_stages);
  out.lowered = LowerProgram(compute, out.stage_to_rank, options.num_microbatches, options.lower);
  VerifyLoweredProgram(out.lowered, out.stage_to_rank, options.num_microbatches);
  std::vector<PipelineStage*> raw;
  for (int s = 0; s < out.num_stages; ++s) {
    if (out.stage_to_rank[s] != pg->rank()) continue;
    out.modules.push_back(PipelineModuleSplit(make_model, names, s));
    out.stages.push_back(std::make_unique<PipelineStage>(*out.modules.back(), s, out.num_stages, pg,
                                                         s == out.num_stages - 1 ? loss_fn : nullptr,
                                                         out.stage_to_rank));
    raw.push_back(out.stages.back().get());
  }
  const ExecutorOptions executor_options{.max_active_stages = options.lower.max_active_stages,
                                         .loss_denominator = options.loss_denominator};
  out.executor = std::make_unique<PipelineExecutor>(raw, out.lowered.at(pg->rank()), options.num_microbatches,
                                                    executor_options);
  return out;
}

RankPipeline PipelineGPT(const nn::GPTConfig& cfg, uint64_t seed, comm::ProcessGroupPtr pg,
                         const PipelineOptions& options, LossFn loss_fn) {
  const int v = options.stages_per_rank > 0 ? options.stages_per_rank
                : (options.kind == ScheduleKind::kGPipe || options.kind == ScheduleKind::k1F1B) ? 1
                                                                                                : 2;
  return PipelineModel([&] {
    Generator gen(seed);
    return std::make_unique<nn::GPT>(cfg, gen);
  }, GPTStageModuleNames(cfg, pg->size() * v), pg, options, loss_fn);
}

}  // namespace tessel::pipelining
