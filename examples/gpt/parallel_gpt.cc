// examples/gpt/parallel_gpt.cc — BuildParallelGpt: pipeline split, then TP -> AC -> fully_shard per part.
#include "examples/gpt/parallel_gpt.h"

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::examples {

ParallelGpt BuildParallelGpt(const nn::GPTConfig& cfg, uint64_t seed, const ParallelMesh& mesh,
                             const ParallelGptOptions& options) {
  const ParallelDims& dims = mesh.dims();
  TESSEL_CHECK(dims.pp == 1 || !options.tp.loss_parallel, "BuildParallelGpt: loss_parallel needs pp == 1, got ",
               dims.ToString());
  const bool sharded = dims.dp_shard > 1;
  ParallelGpt out;
  out.mesh = &mesh;
  if (dims.pp > 1) {  // 1. pipeline split
    out.pipeline = pipelining::PipelineGPT(cfg, seed, mesh.pp_group(),
                                           {.kind = options.schedule, .num_microbatches = options.num_microbatches,
                                            .stages_per_rank = options.stages_per_rank, .lower = {.fsdp = sharded}});
    for (auto& m : out.pipeline->modules) out.parts.push_back(dynamic_cast<nn::GPT*>(m.get()));
  } else {
    Generator gen(seed);
    out.whole = std::make_unique<nn::GPT>(cfg, gen);
    out.parts.push_back(out.whole.get());
  }
  for (nn::GPT* part : out.parts) {  // 2. per part: TP -> activation checkpointing -> fully_shard
    if (mesh.spmd_mesh()) {
      out.fsdp.push_back(ParallelizeGptPart(*part, *mesh.spmd_mesh(), options.tp, options.activation_checkpointing));
      continue;
    }
    // No tp / dp axis (pp alone, or one rank): checkpointing is the only step left.
    CheckpointBlocks(*part, options.tp.activation_checkpointing, options.activation_checkpointing);
    out.fsdp.emplace_back();
  }
  // 3. Nothing to wire for the schedule's FSDP actions: before each step the executor finds each part's
  // fully_shard states and gathers each part once per step, accumulates locally, reduces once per group
  // (pipelining/executor.h).
  return out;
}

nn::StateDict ParallelGpt::NamedParameters() const {
  nn::StateDict out;
  for (nn::GPT* part : parts) {
    for (auto& p : part->NamedParameters()) out.push_back(std::move(p));
  }
  return out;
}

checkpoint::StateDict GetPartsStateDict(const std::vector<const nn::Module*>& parts,
                                        const std::vector<optim::Optimizer*>& optimizers) {
  TESSEL_CHECK(optimizers.size() == parts.size(), "GetPartsStateDict: ", optimizers.size(), " optimizers for ",
               parts.size(), " model parts (one per part)");
  checkpoint::StateDict out;
  for (size_t i = 0; i < parts.size(); ++i) out.merge(checkpoint::GetStateDict(*parts[i], optimizers[i]));
  return out;
}

void SetPartsOptimizerStateDict(const std::vector<const nn::Module*>& parts,
                                const std::vector<optim::Optimizer*>& optimizers, const checkpoint::StateDict& sd) {
  TESSEL_CHECK(optimizers.size() == parts.size(), "SetPartsOptimizerStateDict: ", optimizers.size(),
               " optimizers for ", parts.size(), " model parts (one per part)");
  for (size_t i = 0; i < parts.size(); ++i) {
    // Only this part's keys: SetOptimizerStateDict requires every named parameter to be the part's.
    checkpoint::StateDict own;
    for (const auto& [key, value] : checkpoint::GetStateDict(*parts[i], optimizers[i])) own[key] = sd.at(key);
    checkpoint::SetOptimizerStateDict(*parts[i], *optimizers[i], own);
  }
}

std::vector<const nn::Module*> ParallelGpt::Modules() const { return {parts.begin(), parts.end()}; }

checkpoint::StateDict ParallelGpt::GetStateDict(const std::vector<optim::Optimizer*>& optimizers) const {
  return GetPartsStateDict(Modules(), optimizers);
}

void ParallelGpt::SetOptimizerStateDict(const std::vector<optim::Optimizer*>& optimizers,
                                        const checkpoint::StateDict& sd) const {
  SetPartsOptimizerStateDict(Modules(), optimizers, sd);
}

std::optional<double> ParallelGpt::ForwardBackward(const Tensor& idx_BT, const Tensor& targets_BT) {
  const int64_t dp = mesh->dims().dp_size(), rows = idx_BT.size(0);
  TESSEL_CHECK(rows % dp == 0, "ParallelGpt: the global batch has ", rows, " rows of idx ", ShapeStr(idx_BT.sizes()),
               ", not divisible by the data-parallel size ", dp, " (", mesh->dims().ToString(), ")");
  const int64_t start = mesh->dp_rank() * (rows / dp);
  const Tensor idx = Contiguous(Narrow(idx_BT, 0, start, rows / dp));
  const Tensor targets = Contiguous(Narrow(targets_BT, 0, start, rows / dp));
  std::optional<double> loss;
  if (pipeline) {
    loss = pipeline->executor->Step(idx, targets).loss;
  } else {
    Tensor l = whole->Loss(idx, targets);
    Backward(l);
    loss = l.item<double>();
  }
  if (!loss || !mesh->dp_group()) return loss;
  Tensor t = Scalar(*loss, DType::kFloat64);
  mesh->dp_group()->AllReduce(t, comm::ReduceOp::kAvg)->Wait();
  return t.item<double>();
}

}  // namespace tessel::examples
