// benchmarks/planner_workload.cc — planner_vs_measured_worst: the ledger planner against measurement
// over the grid of examples/gpt/plan_vs_measured.h (12 layouts on the threads backend: pipelines,
// pipelines under fully_shard / HSDP, checkpointing, fully_shard, HSDP, DDP, ZeRO-1/2). Each layout trains
// a small GPT two steps; the figure is the measured / planned ratio farthest from 1 over every layout,
// rank and ledger (params, grads, optim, activations, comm). A memory ratio: 1.0 is a perfect plan, the
// target band 0.95-1.05; the note names the layout, rank and ledger where it occurs.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/figure.h"
#include "core/base/error.h"
#include "examples/gpt/plan_vs_measured.h"

namespace tessel::bench {
namespace {

const bool kRegistered = RegisterFigure("planner_vs_measured_worst", [] {
  auto note = std::make_shared<std::string>();
  Figure f{"planner_vs_measured_worst", {"planner_vs_measured_worst", "ratio", 0, nullptr}, std::nullopt};
  f.precomputed = [note] {
    const std::vector<examples::GridLayout> grid = examples::PlannerGrid();
    double worst = 1.0;
    std::string where = "every ledger exact";
    for (const examples::GridLayout& g : grid) {
      const examples::LayoutCheck c =
          examples::CheckLayout(examples::PlannerGridGpt(), g.layout, examples::kPlannerGridBatch);
      if (std::abs(c.worst_ratio - 1.0) <= std::abs(worst - 1.0)) continue;
      worst = c.worst_ratio;
      where = Str(g.name, " (", c.layout.ToString(), ") ", c.worst_at);
    }
    *note = Str(grid.size(), " layouts x every rank x 5 ledgers; worst ", worst, " at ", where, "; target 0.95-1.05");
    return std::pair<double, double>{worst, 0.0};
  };
  f.note = [note] { return *note; };
  return f;
});

}  // namespace
}  // namespace tessel::bench
