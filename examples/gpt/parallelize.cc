// examples/gpt/parallelize.cc — ParallelizeGpt: Megatron TP (+ SP + loss parallel), then fully_shard.
#include "examples/gpt/parallelize.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/nn/checkpoint_wrapper.h"

namespace tessel::examples {

using dtensor::Replicate;
using dtensor::Shard;

tp::ParallelizePlan GptTensorParallelPlan(const nn::GPTConfig& cfg, const GptParallelism& p) {
  const bool sp = p.sequence_parallel, lp = p.loss_parallel;
  // The residual stream between blocks: sequence-sharded [B, T/tp, C] under SP, else replicated.
  const dtensor::Placement stream = sp ? dtensor::Placement(Shard{1}) : dtensor::Placement(Replicate{});
  // One DTensor input per attention / MLP, so q/k/v (fc, w1/w3) gradients are summed before one reduction.
  const tp::PrepareModuleInput block_input{.input_layouts = {stream}, .desired_input_layouts = {Replicate{}}};
  tp::ParallelizePlan plan = {
      {"wte", tp::RowwiseParallel{.input_layouts = Replicate{}, .output_layouts = stream}},
      {"layers.*.attn", block_input},
      {"layers.*.attn.w[qkv]", tp::ColwiseParallel{}},
      {"layers.*.attn.wo", tp::RowwiseParallel{.output_layouts = stream}},
      {"layers.*.mlp", block_input},
      {cfg.mlp == "swiglu" ? "layers.*.mlp.w[13]" : "layers.*.mlp.fc", tp::ColwiseParallel{}},
      {cfg.mlp == "swiglu" ? "layers.*.mlp.w2" : "layers.*.mlp.proj", tp::RowwiseParallel{.output_layouts = stream}},
  };
  if (sp) {
    // Positions [T] -> [T/tp, C], added to the sequence-sharded token embeddings.
    plan.push_back({"wpe", tp::RowwiseParallel{.input_layouts = Replicate{}, .output_layouts = Shard{0}}});
    for (const char* norm : {"layers.*.ln1", "layers.*.ln2", "ln_f"}) plan.push_back({norm, tp::SequenceParallel{}});
  }
  const dtensor::Placement logits = lp ? dtensor::Placement(Shard{-1}) : dtensor::Placement(Replicate{});
  if (!cfg.tie_embeddings) {
    plan.push_back(
        {"lm_head", tp::ColwiseParallel{.input_layouts = stream, .output_layouts = logits, .use_local_output = !lp}});
  } else {
    // The head reuses wte.weight (vocab-sharded): give it a replicated DTensor input.
    plan.push_back(
        {"ln_f", tp::PrepareModuleOutput{
                     .output_layouts = {stream}, .desired_output_layouts = {Replicate{}}, .use_local_output = false}});
  }
  return plan;
}

namespace {

void ApplyTensorParallel(nn::GPT& gpt, const dtensor::DeviceMesh& tp_mesh, const GptParallelism& p) {
  const int64_t tp = tp_mesh.size();
  for (auto& [fqn, m] : gpt.NamedModules()) {
    const auto* attn = dynamic_cast<const nn::CausalSelfAttention*>(m);
    TESSEL_CHECK(attn == nullptr || attn->n_heads() % tp == 0, "ParallelizeGpt: '", fqn,
                 "' has n_heads=", attn ? attn->n_heads() : 0, " (d_model ", gpt.config().d_model,
                 "), not divisible by the tensor-parallel size ", tp, " of mesh axis '", tp_mesh.axis_names()[0], "'");
  }
  // A pipeline stage holds only some of the GPT's modules: keep the plan entries that match one of them.
  tp::ParallelizePlan plan;
  for (auto& entry : GptTensorParallelPlan(gpt.config(), p)) {
    if (!tp::MatchModules(gpt, entry.first).empty()) plan.push_back(std::move(entry));
  }
  tp::ParallelizeModule(gpt, tp_mesh, plan);
  if (gpt.config().tie_embeddings && !p.loss_parallel) {
    tp::ParallelizeModule(
        gpt, tp_mesh, tp::PrepareModuleOutput{.output_layouts = {Shard{-1}}, .desired_output_layouts = {Replicate{}}});
  }
  if (p.sequence_parallel) {
    gpt.RegisterForwardPreHook([tp](nn::Module&, TensorList& in) {
      TESSEL_CHECK(in.at(0).size(1) % tp == 0, "ParallelizeGpt: sequence parallelism needs the sequence length ",
                   in[0].size(1), " of idx ", ShapeStr(in[0].sizes()), " to divide by tp=", tp);
    });
  }
}

}  // namespace

void CheckpointEachBlock(nn::GPT& gpt, const std::string& policy) {
  if (policy == "none") return;
  for (size_t i = 0; i < gpt.layers().size(); ++i) nn::ApplyActivationCheckpointing(*gpt.layers().at(i), policy);
}

void CheckpointBlocks(nn::GPT& gpt, const std::string& policy, const BlockHook& hook) {
  if (!hook) return CheckpointEachBlock(gpt, policy);
  for (size_t i = 0; i < gpt.layers().size(); ++i) hook(*gpt.layers().at(i));
}

std::vector<fsdp::FSDPModule> ParallelizeGptPart(nn::GPT& gpt, const dtensor::DeviceMesh& mesh, const GptParallelism& p,
                                                const BlockHook& activation_checkpointing) {
  const auto& axes = mesh.axis_names();
  const bool has_tp = std::find(axes.begin(), axes.end(), "tp") != axes.end();
  if (has_tp) ApplyTensorParallel(gpt, mesh["tp"], p);
  CheckpointBlocks(gpt, p.activation_checkpointing, activation_checkpointing);
  std::vector<fsdp::FSDPModule> out;
  if (has_tp && mesh.ndim() == 1) return out;  // no axis left for fully_shard
  for (size_t i = 0; i < gpt.layers().size(); ++i) out.push_back(fsdp::FullyShard(*gpt.layers().at(i), mesh));
  out.push_back(fsdp::FullyShard(gpt, mesh));
  return out;
}

std::optional<fsdp::FSDPModule> ParallelizeGpt(nn::GPT& gpt, const dtensor::DeviceMesh& mesh, const GptParallelism& p) {
  std::vector<fsdp::FSDPModule> groups = ParallelizeGptPart(gpt, mesh, p);
  if (groups.empty()) return std::nullopt;
  return groups.back();
}

}  // namespace tessel::examples
