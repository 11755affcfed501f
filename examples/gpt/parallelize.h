// examples/gpt/parallelize.h — the GPT's parallelization recipe, in the style of torchtitan's
// parallelize.py: Megatron tensor parallelism (+ optional sequence parallelism and loss parallelism) on
// the "tp" axis, then fully_shard per block bottom-up over the rest of a (dp, tp) mesh, root last.
//
// Composition order (DESIGN.md): pipeline split -> tensor parallelism -> activation checkpointing ->
// fully_shard per block bottom-up, root last. ParallelizeGptPart is that rule for one model part;
// examples/gpt/parallel_gpt.h applies it to each pipeline stage. It lives in examples/ because it composes
// tp/ and fsdp/, which never include each other.
//
// Invariant: the parallel model computes the same function as the unsharded GPT (same parameters, same
// global batch): per block 2 all_reduces forward and 2 backward (attention and MLP), or with sequence
// parallelism the same bytes as all_gather + reduce_scatter pairs. Works for GELU and SwiGLU MLPs,
// LayerNorm and RMSNorm, tied and untied embeddings, any vocabulary size (vocab-parallel embedding and
// head shard unevenly). n_heads % tp != 0 is kInvalidArgument naming the attention module; with sequence
// parallelism the sequence length must divide by tp (checked at each forward).
//
// Example (4 ranks, (dp, tp) = (2, 2)):
//   dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
//   ParallelizeGpt(gpt, mesh, {.sequence_parallel = true, .loss_parallel = true});
//   { tp::LossParallel scope; Backward(gpt.Loss(idx_BT, targets_BT)); }   // this dp rank's rows
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/nn/transformer.h"
#include "dtensor/device_mesh.h"
#include "fsdp/fully_shard.h"
#include "tp/parallelize_module.h"

namespace tessel::examples {

struct GptParallelism {
  bool sequence_parallel = false;
  // Leave the logits vocab-sharded [B, T, V] S(-1); compute the loss inside tp::LossParallel.
  bool loss_parallel = false;
  // Activation checkpointing per block, between TP and fully_shard: "none", "full", "selective" (recompute
  // the attention core) or "gemm" (keep the GEMM outputs); core/nn/checkpoint_wrapper.h.
  std::string activation_checkpointing = "none";
};

// Activation checkpointing `policy` ("none" does nothing) on each transformer block of `gpt`.
void CheckpointEachBlock(nn::GPT& gpt, const std::string& policy);

// The Megatron plan for the GPT's submodules (what ParallelizeGpt applies on the tp axis).
tp::ParallelizePlan GptTensorParallelPlan(const nn::GPTConfig& cfg, const GptParallelism& p);

// Applied to each transformer block between tensor parallelism and fully_shard (the activation
// checkpointing slot of the composition order).
using BlockHook = std::function<void(nn::Module& block)>;

// The checkpointing slot itself: `hook` on each block when set, else `policy` (CheckpointEachBlock).
void CheckpointBlocks(nn::GPT& gpt, const std::string& policy, const BlockHook& hook);

// The per-part rule, for the whole GPT or one pipeline stage of it (only the plan entries that match a
// module of `gpt` apply): tensor parallelism on axis "tp" (when present) -> `activation_checkpointing` per
// block -> fully_shard per block bottom-up, root last, over the whole mesh (when an axis is left free).
// Returns the FSDP handles, blocks in order and the root last; empty without fully_shard.
std::vector<fsdp::FSDPModule> ParallelizeGptPart(nn::GPT& gpt, const dtensor::DeviceMesh& mesh, const GptParallelism& p,
                                                const BlockHook& activation_checkpointing = {});

// Tensor parallelism on mesh axis "tp" (when present), then fully_shard over the other axes (when there
// are any; returns the root's FSDPModule then). REQUIRES: the mesh's axes are among "dp" and "tp" (a 1-D
// mesh named otherwise is data parallel).
std::optional<fsdp::FSDPModule> ParallelizeGpt(nn::GPT& gpt, const dtensor::DeviceMesh& mesh, const GptParallelism& p);

}  // namespace tessel::examples
