// planner/planner.cc — PlanRank's composition (see planner.h), FLOPs and the budget verdict.
#include "planner/planner.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "planner/activations.h"
#include "planner/data_parallel.h"
#include "planner/pipeline.h"
#include "planner/tensor_parallel.h"

namespace tessel::planner {
namespace {

bool IsExactFsdpCase(const ModelSpec& m, const Layout& l) {
  return m.gpt.has_value() && m.gpt->dtype == DType::kFloat32 && l.pp == 1 && l.tp == 1 &&
         l.zero_stage == 3 && l.ac == ActivationCheckpointing::kNone && l.num_microbatches == 1 &&
         l.param_dtype == DType::kFloat32 && l.reduce_dtype == DType::kFloat32 && l.optim_dtype == DType::kFloat32 &&
         !l.master_weights && l.seq_len == m.gpt->seq_len;
}

std::vector<std::pair<const char*, int64_t>> Ledgers(const LedgerPlan& p) {
  return {{"params", p.params}, {"grads", p.grads}, {"optim", p.optim}, {"activations", p.activations},
          {"comm", p.comm}};
}

}  // namespace

std::string_view MeshAxisName(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kPp: return "pp";
    case MeshAxis::kDpReplicate: return "dp_replicate";
    case MeshAxis::kDpShard: return "dp_shard";
    case MeshAxis::kTp: return "tp";
  }
  return "?";
}

double StepFlops(const ModelSpec& m, const Layout& l, int64_t stage) {
  TESSEL_CHECK(stage >= 0 && stage < l.pp, "planner: stage ", stage, " is not a stage of the layout's pp=", l.pp);
  const std::vector<LocalParam> params = LocalParams(m, l, MeshCoord{.pp = stage});
  double block_weights = 0, head_weights = 0;
  for (const LocalParam& p : params) {
    if (!p.is_matmul_weight) continue;
    (p.block >= 0 ? block_weights : head_weights) += static_cast<double>(p.tp_numel);
  }
  const double blocks = static_cast<double>(BlocksOfStage(m, l, stage).count);
  const double attention = 4.0 * static_cast<double>(l.seq_len) * static_cast<double>(m.d_model) /
                           static_cast<double>(l.tp) * blocks;  // per token
  const double block_forward = 2.0 * block_weights + attention;
  double per_token = 3.0 * (block_forward + 2.0 * head_weights);
  if (l.ac == ActivationCheckpointing::kFull) per_token += block_forward;
  if (l.ac == ActivationCheckpointing::kSelective) per_token += attention;
  const double tokens = static_cast<double>(l.global_batch / l.Dp()) * static_cast<double>(l.seq_len);
  return per_token * tokens;
}

RankPlan PlanRank(const ModelSpec& m, const Layout& l, int64_t rank, int64_t measured_activations) {
  Verify(l, m, l.WorldSize());
  RankPlan plan;
  plan.rank = rank;
  plan.coord = CoordOf(l, rank);
  const int64_t stage = plan.coord.pp;
  const std::vector<LocalParam> params = LocalParams(m, l, plan.coord);
  if (IsExactFsdpCase(m, l)) {
    plan.activations_measured = measured_activations >= 0;
    const int64_t activations = plan.activations_measured ? measured_activations : ActivationsBytes(m, l, stage);
    plan.ledgers = PlanGptFullyShard(*m.gpt, l.dp_shard, plan.coord.dp_shard, activations);
    plan.exact = true;
  } else {
    const StateBytes state = DataParallelState(params, l);
    LedgerPlan& p = plan.ledgers;
    p.params = state.params;
    // The input gradients the stage keeps (pipeline.h): every microbatch's, except that the grads peak of
    // pipelined fully_shard is in the last microbatch's backward, before its input gradient exists.
    const bool pipelined_fsdp = l.pp > 1 && l.zero_stage == 3;
    p.grads = state.grads + (pipelined_fsdp ? l.num_microbatches - 1 : l.num_microbatches) *
                                PpInputGradBytes(m, l, stage);
    p.optim = state.optim;
    p.activations = ActivationsBytes(m, l, stage);
    // The data-parallel buffers peak in backward, with SP's sequence staging beside them; the logits'
    // gather comes alone at the end of forward (tests/tp_memory_test.cc, the main job's --tp modes).
    const TpCommBuffers tp = TpCommBufferBytes(m, l, stage);
    p.comm = std::max(state.comm + tp.sequence, tp.logits) + PpCommBufferBytes(m, l, stage);
    p.total = p.params + p.grads + p.optim + p.activations + p.comm;
  }
  const DpAxisBytes dp = DataParallelAxisBytes(params, l);
  plan.axis_bytes[static_cast<int>(MeshAxis::kPp)] = PpAxisBytes(m, l, stage);
  plan.axis_bytes[static_cast<int>(MeshAxis::kDpReplicate)] = dp.dp_replicate;
  plan.axis_bytes[static_cast<int>(MeshAxis::kDpShard)] = dp.dp_shard;
  plan.axis_bytes[static_cast<int>(MeshAxis::kTp)] = TpAxisBytes(m, l, stage);
  plan.flops = StepFlops(m, l, stage);
  return plan;
}

std::string RankPlanVsMeasured(const ModelSpec& m, const Layout& l, int64_t rank, const memory::DeviceStats& measured) {
  try {
    const RankPlan plan = PlanRank(m, l, rank);
    return Str("rank ", rank, " steady-state peaks vs the plan (", l.ToString(), "):\n",
               FormatPlanVsMeasured(plan.ledgers, measured));
  } catch (const Error& e) {
    return Str("rank ", rank, ": no plan: ", e.what(), "\n");
  }
}

RankPlan PlanPeakRank(const ModelSpec& m, const Layout& l, int64_t measured_activations) {
  RankPlan worst = PlanRank(m, l, 0, measured_activations);
  for (int64_t r = 1; r < l.WorldSize(); ++r) {
    if (CoordOf(l, r).dp_replicate != 0) continue;  // replicas hold what dp_replicate 0 holds
    RankPlan p = PlanRank(m, l, r, measured_activations);
    if (p.ledgers.total > worst.ledgers.total) worst = std::move(p);
  }
  return worst;
}

std::optional<OverBudget> ExceedsBudget(const LedgerPlan& plan, int64_t budget) {
  if (plan.total <= budget) return std::nullopt;
  OverBudget out;
  for (const auto& [name, bytes] : Ledgers(plan)) {
    if (bytes > out.bytes) out = {name, bytes, bytes > budget};
  }
  return out;
}

int64_t ParseBytes(const std::string& text, std::string_view what) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    TESSEL_CHECK(false, what, "='", text, "' is not a number with a unit (e.g. 80GiB)");
  }
  const std::string unit = text.substr(end);
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
  for (const auto& [name, scale] : units) {
    if (unit != name) continue;
    const double bytes = value * scale;
    TESSEL_CHECK(bytes >= 1 && bytes < 9.2e18, what, "='", text, "' is not a positive byte count below 8 EiB");
    return static_cast<int64_t>(bytes);
  }
  TESSEL_CHECK(false, what, "='", text, "' has unknown unit '", unit, "' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  return 0;
}

std::string FormatRankPlan(const RankPlan& plan, int64_t budget) {
  auto gib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); };
  char line[200];
  std::string s = Str("rank ", plan.rank, " (pp ", plan.coord.pp, ", dp_replicate ", plan.coord.dp_replicate,
                      ", dp_shard ", plan.coord.dp_shard, ", tp ", plan.coord.tp, "), ",
                      plan.exact ? (plan.activations_measured ? "exact fully_shard plan, activations measured"
                                                              : "exact fully_shard plan, activations analytic")
                                 : "analytic plan",
                      ":\n");
  s += "  ledger               peak B         GiB  of budget\n";
  std::vector<std::pair<const char*, int64_t>> rows = Ledgers(plan.ledgers);
  rows.push_back({"total", plan.ledgers.total});
  for (const auto& [name, bytes] : rows) {
    std::snprintf(line, sizeof(line), "  %-12s %15lld %11.3f %9.1f%%\n", name, static_cast<long long>(bytes),
                  gib(bytes),
                  budget > 0 ? 100.0 * static_cast<double>(bytes) / static_cast<double>(budget) : 0.0);
    s += line;
  }
  s += "  bytes sent per step:";
  for (int a = 0; a < kNumMeshAxes; ++a) {
    s += Str(" ", MeshAxisName(static_cast<MeshAxis>(a)), " ", plan.axis_bytes[static_cast<size_t>(a)]);
  }
  std::snprintf(line, sizeof(line), "\n  FLOPs per step: %.4g\n", plan.flops);
  s += line;
  if (const std::optional<OverBudget> over = ExceedsBudget(plan.ledgers, budget)) {
    std::snprintf(line, sizeof(line), "  DOES NOT FIT: total %.3f GiB > budget %.3f GiB; ", gib(plan.ledgers.total),
                  gib(budget));
    s += line;
    s += over->alone ? Str(over->ledger, " alone exceeds the budget (", over->bytes, " B)\n")
                     : Str("the largest ledger is ", over->ledger, " (", over->bytes, " B)\n");
  } else {
    std::snprintf(line, sizeof(line), "  fits: total %.3f GiB <= budget %.3f GiB\n", gib(plan.ledgers.total),
                  gib(budget));
    s += line;
  }
  return s;
}

}  // namespace tessel::planner
