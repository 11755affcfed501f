// planner/memory_plan.h — the exact FSDP memory plan (DESIGN.md "Memory ledger"): per-rank, per-ledger
// peak bytes predicted for a GPT trained with fully_shard, to hold against the allocator's measured
// peaks and answer "which ledger blew up?". tests/fsdp_memory_test.cc holds it to the measurement for
// W = 1, 2, 4 and HSDP 2 × 2 (every ledger to the byte, the total within 0.2%); planner::PlanRank uses
// it for those layouts and //planner:plan prints it. Moved here from fsdp/ (DESIGN.md: the planner
// depends on core/ only; fsdp/ never includes it).
//
// Strategy covered: each transformer block wrapped with FullyShard, then the root; default options
// (blocks reshard after forward, the root does not); fp32 parameters and gradients; AdamW (two state
// tensors per parameter); W ranks on one mesh axis. Steady state: a step after the first, once the
// optimizer state exists and gradients were zeroed.
//
// Derivation, for rank r (bytes; S(g) = Σ_{p in g} padded(p), a group's shard block):
//   padded(p)   = ceil(d0 / W) * row_numel(p) * 4      (what every rank stores and all-gathers)
//   local(p)    = ChunkPieceOf(d0, W, r).size * row_numel(p) * 4
//   params      = Σ padded (the sharded state) + W·S(root) (the root stays unsharded from its forward
//                 to the end of backward) + W·max S(block) (the one block currently unsharded; the
//                 prefetched block is still an all-gather buffer, in comm)
//   R(g)        = S(g) + (W > 1 ? 4 · 16 · ceil(params(g) / 16) : 0) (a reduce-scatter block: the shard
//                 block, then fsdp/collectives.h's gradient flags)
//   grads       = the larger of: the end of backward, Σ_blocks R(block) (sharded gradients, views of the
//                 reduce-scatter outputs) + the root's unsharded gradients (reduced last, in the
//                 end-of-backward callback); and block 0's post-backward, its unsharded gradients + the
//                 other blocks' R + the head's gradients (lm_head, ln_f: computed before any block's)
//   optim       = 2 · Σ local
//   comm        = W = 1: the largest group's reduce-scatter buffer (no all-gather is needed);
//                 W > 1: the prefetched block's in-place all-gather (W·S: the input is a view of the
//                 output) while the current block's reduce-scatter is staged (input + output, (W+1)·R)
//   activations = what the same model saves for backward on the same local batch without FSDP (FSDP
//                 does not change activations): measured by MeasureGptActivations, one unsharded step
//   total       = optim + params + activations + W·max S(block) (W > 1) + head gradients: the peak is
//                 inside the first block's backward, where the activations peak, the root and that
//                 block are unsharded, the next block's all-gather is in flight and only the head has
//                 gradients.
//
// Example:
//   const int64_t act = MeasureGptActivations(cfg, /*local_batch=*/4);
//   LedgerPlan p = PlanGptFullyShard(cfg, /*world=*/4, /*rank=*/0, act);
//   std::cout << FormatPlanVsMeasured(p, memory::Stats(CurrentDevice()));
#pragma once

#include <cstdint>
#include <string>

#include "core/memory/allocator.h"
#include "core/nn/transformer.h"

namespace tessel::planner {

struct LedgerPlan {
  int64_t params = 0, grads = 0, optim = 0, comm = 0, activations = 0, total = 0;
};

// REQUIRES: world >= 1, 0 <= rank < world, cfg.dtype float32 (kInvalidArgument otherwise).
LedgerPlan PlanGptFullyShard(const nn::GPTConfig& cfg, int64_t world, int64_t rank, int64_t activations);

// Activations-ledger peak of one unsharded forward + backward of `cfg` on `local_batch` sequences of
// cfg.seq_len tokens, on a thread of its own bound to cpu:0 (runs a step: about the cost of one training
// step). REQUIRES: no other thread allocates activations on cpu:0 meanwhile (call it before ranks start).
// `ac` checkpoints every block first (core/nn/checkpoint_wrapper.h: "none", "full", "selective", "gemm").
int64_t MeasureGptActivations(const nn::GPTConfig& cfg, int64_t local_batch, const std::string& ac = "none");

// The allocator's peaks of `stats` (one device) as a LedgerPlan, to compare with a plan field by field.
LedgerPlan MeasuredPeaks(const memory::DeviceStats& stats);

// A table, one ledger per line: predicted bytes, and with `measured` the measured peaks and ratios.
std::string FormatPlan(const LedgerPlan& plan);
std::string FormatPlanVsMeasured(const LedgerPlan& plan, const memory::DeviceStats& measured);

}  // namespace tessel::planner
