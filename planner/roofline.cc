// planner/roofline.cc — the step-time formula and the layout search of roofline.h.
#include "planner/roofline.h"

#include <algorithm>

#include "core/base/error.h"
#include "planner/pipeline.h"

namespace tessel::planner {
namespace {

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

double AxisSeconds(const RankPlan& plan, const Layout& l, const Hardware& hw, MeshAxis axis) {
  const double bw = AxisWithinNode(l, axis, hw.ranks_per_node) ? hw.intra_node_bytes_per_s : hw.inter_node_bytes_per_s;
  return static_cast<double>(plan.axis_bytes[static_cast<size_t>(axis)]) / bw;
}

}  // namespace

bool AxisWithinNode(const Layout& l, MeshAxis axis, int64_t ranks_per_node) {
  // Sizes in mesh order (pp, dp_replicate, dp_shard, tp); an axis's group spans stride · size ranks.
  const int64_t sizes[kNumMeshAxes] = {l.pp, l.dp_replicate, l.dp_shard, l.tp};
  int64_t span = 1;
  for (int a = kNumMeshAxes - 1; a >= static_cast<int>(axis); --a) span *= sizes[a];
  return sizes[static_cast<int>(axis)] == 1 || span <= ranks_per_node;
}

StepEstimate EstimateStep(const RankPlan& plan, const Layout& l, const Hardware& hw) {
  StepEstimate e;
  e.compute_s = plan.flops / hw.peak_flops;
  e.bubble = BubbleFactor(l);
  e.tp_s = AxisSeconds(plan, l, hw, MeshAxis::kTp);
  e.pp_s = AxisSeconds(plan, l, hw, MeshAxis::kPp);
  e.dp_s = AxisSeconds(plan, l, hw, MeshAxis::kDpShard) + AxisSeconds(plan, l, hw, MeshAxis::kDpReplicate);
  e.step_s = (e.compute_s + e.tp_s) * e.bubble + e.pp_s + std::max(0.0, e.dp_s - e.compute_s);
  return e;
}

std::vector<Candidate> RankLayouts(const ModelSpec& m, int64_t world, const Layout& base, int64_t micro_batch,
                                   const Hardware& hw, int64_t budget) {
  TESSEL_CHECK(world >= 1 && micro_batch >= 1, "planner: RankLayouts needs world >= 1 and micro_batch >= 1, got ",
               world, " and ", micro_batch);
  std::vector<Candidate> out;
  for (int64_t tp : Divisors(world)) {
    if (tp > hw.ranks_per_node) continue;
    for (int64_t pp : Divisors(world / tp)) {
      const int64_t dp = world / tp / pp;
      if (base.global_batch % (dp * micro_batch) != 0) continue;
      for (int64_t dp_shard : Divisors(dp)) {
        for (int zero = dp_shard == 1 ? 0 : 1; zero <= (dp_shard == 1 ? 0 : 3); ++zero) {
          for (ActivationCheckpointing ac : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                                             ActivationCheckpointing::kFull}) {
            Layout l = base;
            l.pp = pp;
            l.tp = tp;
            l.dp_shard = dp_shard;
            l.dp_replicate = dp / dp_shard;
            l.zero_stage = zero;
            l.sequence_parallel = tp > 1;
            l.ac = ac;
            l.num_microbatches = base.global_batch / (dp * micro_batch);
            try {
              Verify(l, m, world);
            } catch (const Error&) {
              continue;  // e.g. heads or layers not divisible: not a layout of this model
            }
            RankPlan peak = PlanPeakRank(m, l);
            if (peak.ledgers.total > budget) continue;
            const StepEstimate step = EstimateStep(peak, l, hw);
            out.push_back({l, std::move(peak), step});
          }
        }
      }
    }
  }
  // Fastest first; among equally fast layouts, the one with the most memory to spare.
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.step.step_s != b.step.step_s) return a.step.step_s < b.step.step_s;
    return a.peak.ledgers.total < b.peak.ledgers.total;
  });
  return out;
}

}  // namespace tessel::planner
