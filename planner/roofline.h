// planner/roofline.h — a roofline estimate of step time for a planned layout, and the search over
// layouts of a world size that ranks the ones fitting a memory budget by it.
//
// Invariant: the estimate is a stated formula of the plan's FLOPs and axis bytes, nothing measured:
//   compute = FLOPs / peak FLOP/s            axis time = bytes sent on the axis / that axis's bandwidth
//   step    = (compute + tp) · bubble + pp + max(0, dp_shard + dp_replicate − compute)
// tp collectives sit on the critical path of every microbatch (so the bubble stretches them like
// compute), pipeline p2p is exposed, data-parallel traffic overlaps compute (FSDP prefetch, DDP
// buckets) and only its excess shows. An axis whose groups fit inside one node (mesh order (pp,
// dp_replicate, dp_shard, tp), tp fastest, consecutive ranks on a node) uses the intra-node
// bandwidth, otherwise the inter-node one.
//
// Example:
//   Hardware hw;                                     // H100-like defaults, see below
//   std::vector<Candidate> fit = RankLayouts(ModelPreset("llama-7b"), 8, base, hw, 80LL << 30);
#pragma once

#include <cstdint>
#include <vector>

#include "planner/layout.h"
#include "planner/model_spec.h"
#include "planner/planner.h"

namespace tessel::planner {

struct Hardware {
  double peak_flops = 989e12;            // FLOP/s per rank (H100 SXM dense bf16)
  double intra_node_bytes_per_s = 450e9;  // per rank, one direction (NVLink 4)
  double inter_node_bytes_per_s = 50e9;   // per rank (one 400 Gb/s NIC per GPU)
  int64_t ranks_per_node = 8;
};

bool AxisWithinNode(const Layout& layout, MeshAxis axis, int64_t ranks_per_node);

struct StepEstimate {
  double compute_s = 0, bubble = 1, tp_s = 0, pp_s = 0, dp_s = 0, step_s = 0;
};
StepEstimate EstimateStep(const RankPlan& plan, const Layout& layout, const Hardware& hw);

struct Candidate {
  Layout layout;
  RankPlan peak;  // the rank with the largest total
  StepEstimate step;
};

// Every layout of `world` ranks that passes Verify — pp and tp (tp <= ranks_per_node) over the
// divisors of world, the rest split into dp_replicate × dp_shard, ZeRO 0 when dp_shard == 1 else 1-3,
// sequence parallelism whenever tp > 1, checkpointing none / selective / full, `base.schedule`, and
// num_microbatches = global_batch / (dp · micro_batch) — keeping base's dtypes, batch and sequence.
// Returns those whose peak rank fits `budget_bytes`, fastest estimated step first (ties: the smaller
// peak first).
std::vector<Candidate> RankLayouts(const ModelSpec& model, int64_t world, const Layout& base, int64_t micro_batch,
                                   const Hardware& hw, int64_t budget_bytes);

}  // namespace tessel::planner
