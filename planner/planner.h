// planner/planner.h — the ledger planner: for a model × layout, each rank's peak bytes per ledger
// (params, grads, optimizer state, activations, comm buffers), the bytes each mesh axis moves per
// step and the FLOPs per step; and "which ledger blew up?" against a per-rank budget.
//
// Invariant: PlanRank composes one function per ledger per primitive and nothing else —
//   params, grads, optim   data_parallel.h (ZeRO 0-3 / fully_shard) on sharding.h's local pieces (pp, tp)
//   activations            activations.h (Korthikanti, ÷ tp, × pipeline.h's microbatches in flight)
//   comm                   data_parallel.h + tensor_parallel.h + pipeline.h buffers
//   axis bytes             DataParallelAxisBytes, TpAxisBytes, PpAxisBytes
// so a primitive's measured ledger replaces its one function. The analytic total is the sum of the
// ledgers' peaks (an upper bound: they need not peak together). One case is exact instead: a model
// from FromGptConfig under fully_shard or HSDP (zero_stage 3 over dp_shard, any dp_replicate, fp32,
// no tp / pp / checkpointing, one microbatch) goes through PlanGptFullyShard (memory_plan.h) on the
// dp_shard axis (HSDP's all-reduce runs in place, so it adds no ledger bytes), held to the
// allocator's peaks by tests/fsdp_memory_test.cc, with the caller's measured activations or else the
// analytic ones of tessel's saved tensors (activations.h; equal to the measurement to the byte,
// activations_measured_test.cc).
//
// Example:
//   Layout l{.dp_shard = 8, .zero_stage = 3, .global_batch = 8, .seq_len = 4096};
//   RankPlan worst = PlanPeakRank(ModelPreset("llama-7b"), l);
//   std::cout << FormatRankPlan(worst, /*budget_bytes=*/80LL << 30);
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "planner/layout.h"
#include "planner/memory_plan.h"
#include "planner/model_spec.h"
#include "planner/sharding.h"

namespace tessel::planner {

enum class MeshAxis { kPp, kDpReplicate, kDpShard, kTp };
inline constexpr int kNumMeshAxes = 4;
std::string_view MeshAxisName(MeshAxis axis);  // "pp", "dp_replicate", "dp_shard", "tp"

struct RankPlan {
  int64_t rank = 0;
  MeshCoord coord;
  LedgerPlan ledgers;
  std::array<int64_t, kNumMeshAxes> axis_bytes{};  // sent by this rank per step, indexed by MeshAxis
  double flops = 0;                                // this rank's FLOPs per step
  bool exact = false;                 // from PlanGptFullyShard (see above)
  bool activations_measured = false;  // exact, with the caller's measured activations
};

// REQUIRES: Verify(layout, model, layout.WorldSize()) passes (PlanRank calls it). measured_activations
// >= 0 feeds the exact FSDP plan when the case above applies, and is ignored otherwise.
RankPlan PlanRank(const ModelSpec& model, const Layout& layout, int64_t rank, int64_t measured_activations = -1);
// "Which ledger blew up?" for one rank of a running job: "rank R steady-state peaks vs the plan
// (<layout>):" and FormatPlanVsMeasured's table of PlanRank(model, layout, rank) against `measured`
// (the rank's memory::Stats), or "rank R: no plan: <why>" when the layout does not verify.
std::string RankPlanVsMeasured(const ModelSpec& model, const Layout& layout, int64_t rank,
                               const memory::DeviceStats& measured);
// The rank with the largest total (first of equals).
RankPlan PlanPeakRank(const ModelSpec& model, const Layout& layout, int64_t measured_activations = -1);

// FLOPs per step of one rank: 3× the forward (backward = 2× forward) plus recomputation; the forward
// is 2 FLOPs per multiply-add of every GEMM — weights (lm_head included, embedding lookups not) and
// attention (QKᵀ and attention over V: 4·s·h/t per token per block, causal masking not subtracted).
// Full checkpointing adds the blocks' forward, selective the attention core's.
// kInvalidArgument for a stage outside [0, layout.pp).
double StepFlops(const ModelSpec& model, const Layout& layout, int64_t stage);

// The ledger that most exceeds `budget_bytes` on its own, or else the largest one when the total
// does; nullopt when the plan fits.
struct OverBudget {
  std::string ledger;      // "params", "grads", "optim", "activations", "comm"
  int64_t bytes = 0;       // that ledger's peak
  bool alone = false;      // the ledger by itself exceeds the budget
};
std::optional<OverBudget> ExceedsBudget(const LedgerPlan& plan, int64_t budget_bytes);

// A per-rank budget in bytes from text: a positive number and a unit, "80GiB", "40GB", "1.5TiB", "512MiB", or
// bytes ("123", "123B"); binary (KiB ... TiB) and decimal (KB ... TB) units. kInvalidArgument naming `what` and
// the text otherwise (no unit it knows, not a number, not positive, or past int64).
int64_t ParseBytes(const std::string& text, std::string_view what = "budget");

// The per-ledger table (bytes, GiB, share of the budget), the axis bytes and FLOPs, and the verdict.
std::string FormatRankPlan(const RankPlan& plan, int64_t budget_bytes);

}  // namespace tessel::planner
