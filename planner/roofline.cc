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

// Checkpointing policies, each with and without sequence parallelism when tp > 1: a sequence that tp does
// not divide rules SP out, and plain TP was then never tried.
std::vector<std::pair<ActivationCheckpointing, bool>> AcAndSp(int64_t tp) {
  std::vector<std::pair<ActivationCheckpointing, bool>> out;
  for (ActivationCheckpointing ac :
       {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective, ActivationCheckpointing::kFull}) {
    if (tp > 1) out.emplace_back(ac, true);
    out.emplace_back(ac, false);
  }
  return out;
}

// The step of the slowest rank. A pipeline step is set by its slowest stage, usually the last (it runs the
// lm_head), not by the rank with the most memory (stage 0 under 1F1B, which holds the most microbatches):
// ranking layouts by the memory peak rank's FLOPs put a pp4 layout first at 0.0062 s whose last stage
// needs 0.0152 s.
StepEstimate SlowestStep(const ModelSpec& m, const Layout& l, const Hardware& hw) {
  StepEstimate worst;
  bool any = false;
  for (int64_t r = 0; r < l.WorldSize(); ++r) {
    if (CoordOf(l, r).dp_replicate != 0) continue;  // replicas run what dp_replicate 0 runs
    const StepEstimate e = EstimateStep(PlanRank(m, l, r), l, hw);
    if (!any || e.step_s > worst.step_s) worst = e;
    any = true;
  }
  return worst;
}

std::vector<Candidate> RankLayouts(const ModelSpec& m, int64_t world, const Layout& base, int64_t micro_batch,
                                   const Hardware& hw, int64_t budget) {
  TESSEL_CHECK(world >= 1 && micro_batch >= 1, "planner: RankLayouts needs world >= 1 and micro_batch >= 1, got ",
               world, " and ", micro_batch);
  // What every candidate takes from `base` and `hw`: a bad value there is the caller's error, not "nothing fits".
  m.Validate();
  TESSEL_CHECK(base.global_batch >= 1 && base.seq_len >= 1, "planner: RankLayouts' base needs global_batch and ",
               "seq_len >= 1, got ", base.global_batch, " and ", base.seq_len);
  TESSEL_CHECK(!m.learned_positions || base.seq_len <= m.max_seq_len, "planner: RankLayouts' base seq_len ",
               base.seq_len, " exceeds ", m.name, "'s learned positions (max_seq_len ", m.max_seq_len, ")");
  for (const DType d : {base.param_dtype, base.reduce_dtype, base.optim_dtype}) {
    TESSEL_CHECK(IsFloating(d), "planner: RankLayouts' base dtypes must be floating, got ", d);
  }
  TESSEL_CHECK(hw.peak_flops > 0 && hw.intra_node_bytes_per_s > 0 && hw.inter_node_bytes_per_s > 0 &&
                   hw.ranks_per_node >= 1,
               "planner: the hardware needs positive FLOP/s, bandwidths and ranks per node, got ", hw.peak_flops, ", ",
               hw.intra_node_bytes_per_s, ", ", hw.inter_node_bytes_per_s, ", ", hw.ranks_per_node);
  std::vector<Candidate> out;
  for (int64_t tp : Divisors(world)) {
    if (tp > hw.ranks_per_node) continue;
    for (int64_t pp : Divisors(world / tp)) {
      const int64_t dp = world / tp / pp;
      if (base.global_batch % (dp * micro_batch) != 0) continue;
      for (int64_t dp_shard : Divisors(dp)) {
        for (int zero = dp_shard == 1 ? 0 : 1; zero <= (dp_shard == 1 ? 0 : 3); ++zero) {
          for (const auto [ac, sp] : AcAndSp(tp)) {
            Layout l = base;
            l.pp = pp;
            l.tp = tp;
            l.dp_shard = dp_shard;
            l.dp_replicate = dp / dp_shard;
            l.zero_stage = zero;
            l.sequence_parallel = sp;
            l.ac = ac;
            l.num_microbatches = base.global_batch / (dp * micro_batch);
            try {
              Verify(l, m, world);
            } catch (const Error&) {
              continue;  // e.g. heads or layers not divisible: not a layout of this model
            }
            RankPlan peak = PlanPeakRank(m, l);
            if (peak.ledgers.total > budget) continue;
            const StepEstimate step = SlowestStep(m, l, hw);
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
