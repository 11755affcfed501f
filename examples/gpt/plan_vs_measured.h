// examples/gpt/plan_vs_measured.h — the planner held to measurement: train a GPT two steps under one layout
// on the threads backend and compare every rank's ledger peaks (core/memory's allocator) with planner/'s
// plan for the same layout.
//
// A layout is a ParallelDims (pp, dp_replicate, dp_shard, tp), the pipeline schedule and microbatches, the
// ZeRO stage, sequence parallelism and the activation-checkpointing policy. ZeRO-3 over dp_shard is the
// recipe's fully_shard (examples/gpt/parallel_gpt.h: pipeline split -> TP -> AC -> fully_shard); ZeRO 0-2
// with data parallelism is fsdp/replicate.h's Replicate + ZeroOptimizer over all the ranks (pp = tp = 1;
// the planner's DDP is dp_replicate, ZeRO-1/2 act on dp_shard).
//
// Invariant: the measured peaks (and axis bytes) are those of the second step (the first creates the optimizer state;
// peaks are reset between the two), the steady state the planner plans; the optimizer is AdamW (two fp32
// moments per parameter), everything fp32.
//
// Example:
//   LayoutCheck c = CheckLayout(SmallGpt(), {.dims = {.pp = 2, .dp_shard = 2}, .microbatches = 2}, 8);
//   std::cout << FormatLayoutCheck(c);      // per rank, per ledger: planned, measured, ratio
//   c.worst_ratio;                          // the ratio farthest from 1 over every rank and ledger
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/nn/transformer.h"
#include "examples/gpt/parallel_dims.h"
#include "pipelining/schedules.h"
#include "planner/layout.h"
#include "planner/memory_plan.h"
#include "planner/planner.h"

namespace tessel::examples {

struct CheckedLayout {
  ParallelDims dims;
  pipelining::ScheduleKind schedule = pipelining::ScheduleKind::k1F1B;  // GPipe or 1F1B (what the planner plans)
  int microbatches = 1;  // per step; must be 1 when pp == 1
  int zero_stage = 3;    // 3: fully_shard over dp_shard (or no data parallelism); 0-2: Replicate (pp = tp = 1)
  bool sequence_parallel = false;
  std::string ac = "none";  // none, full, selective

  // The planner's Layout for this layout, `global_batch` sequences of cfg.seq_len tokens.
  planner::Layout ToPlannerLayout(const nn::GPTConfig& cfg, int64_t global_batch) const;
  std::string ToString() const;  // the planner layout's: "pp2(1f1b,m2) dp_replicate1 dp_shard2 zero3 tp1 ac=none"
};

struct RankLedgers {
  int rank = 0;
  planner::LedgerPlan planned, measured;  // measured.total: the allocator's total peak
  // Bytes this rank sends per step on each mesh axis (indexed by planner::MeshAxis): the plan's, and the
  // ring bytes of the collectives the comm tracer saw in the second step (sends on "pp").
  std::array<int64_t, planner::kNumMeshAxes> planned_axis_bytes{}, measured_axis_bytes{};
};

struct LayoutCheck {
  CheckedLayout layout;
  std::vector<RankLedgers> ranks;  // by rank
  double worst_ratio = 1.0;        // measured / planned, farthest from 1 over ranks and ledgers
  std::string worst_at;            // "rank 3 grads"
};

// Trains `cfg` two steps on layout.dims.world_size() threads-backend ranks and compares. Throws
// kInvalidArgument for a layout the planner or the recipe refuses (naming it).
LayoutCheck CheckLayout(const nn::GPTConfig& cfg, const CheckedLayout& layout, int64_t global_batch);

// measured / planned for one ledger (1 when both are 0; +inf when only the plan is 0).
double LedgerRatio(int64_t planned, int64_t measured);

// One line per rank and ledger: planned B, measured B, ratio; then the worst.
std::string FormatLayoutCheck(const LayoutCheck& check);

// The grid tests/planner_grid_test.cc and //benchmarks:report's planner_vs_measured_worst run: 18
// layouts of at most 8 ranks — pipelines (1F1B, GPipe; pp 2 and 4; 2-4 microbatches; full and selective
// checkpointing; under fully_shard and HSDP), fully_shard, HSDP with full checkpointing, DDP, ZeRO-1,
// ZeRO-2, and tensor parallelism (tp 2, with and without sequence parallelism, under fully_shard, under a
// pipeline, and pp 2 x dp_shard 2 x tp 2) — on a GPT of d_model 16, 4 layers, seq 16 and a global batch
// of 8 sequences.
struct GridLayout {
  std::string name;  // "pp2_1f1b_m2"
  CheckedLayout layout;
};
std::vector<GridLayout> PlannerGrid();
nn::GPTConfig PlannerGridGpt();
inline constexpr int64_t kPlannerGridBatch = 8;

}  // namespace tessel::examples
