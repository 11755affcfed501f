// tests/tp_memory_test.cc — the memory plan of tensor parallelism held by the measurement: a small GPT
// trained 3 steps under examples/gpt/parallelize's recipe on the threads backend — TP 2, TP 2 +
// sequence parallelism, and 2-D (dp_shard 2, tp 2) — and each rank's steady-state peak of every ledger
// (the third step: optimizer state exists, gradients were zeroed) against planner::PlanRank: params,
// grads, optimizer state and comm buffers to the byte, activations within the per-case tolerance.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/memory/allocator.h"
#include "planner/planner.h"
#include "tests/tp_gpt_testing.h"

namespace tessel::fsdp::testing {
namespace {

using planner::LedgerPlan;

nn::GPTConfig MemoryGpt() {
  return nn::GPTConfig{.vocab_size = 128, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 16};
}
constexpr int64_t kGlobalBatch = 4;

struct Case {
  const char* name;
  int64_t dp_shard, tp;
  bool sp;
  // The analytic activations (planner/activations.h: Korthikanti's terms plus tessel's saved
  // tensors) are within 5% for TP and TP + SP here (measured 0.970 and 1.030 of the plan). Known gap,
  // held here so it cannot grow: under (dp_shard, tp) the plan's cross-entropy moment is not where
  // fully_shard's peak is (measured 0.916). Under SP the plan also misses one whole [B, T, C] per
  // block (the measured per-block slope is e·sbh above the plan's; not a saved tensor — the tensors
  // saved for backward match the plan: the 3 gathered ones whole, the other 9 halved), which this
  // 2-block model hides.
  double activations_tolerance;
};

planner::Layout LayoutOf(const Case& c, const nn::GPTConfig& cfg) {
  return planner::Layout{.dp_shard = c.dp_shard, .zero_stage = c.dp_shard > 1 ? 3 : 0, .tp = c.tp,
                         .sequence_parallel = c.sp, .param_dtype = DType::kFloat32,
                         .reduce_dtype = DType::kFloat32, .global_batch = kGlobalBatch, .seq_len = cfg.seq_len};
}

std::vector<LedgerPlan> Measure(const Case& c, const nn::GPTConfig& cfg) {
  const int world_size = static_cast<int>(c.dp_shard * c.tp);
  std::vector<LedgerPlan> out(static_cast<size_t>(world_size));
  comm::RunRanks(world_size, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = c.dp_shard == 1 ? dtensor::InitDeviceMesh(world, {c.tp}, {"tp"})
                                                     : dtensor::InitDeviceMesh(world, {c.dp_shard, c.tp}, {"dp", "tp"});
    Generator gen(7);
    auto gpt = std::make_unique<nn::GPT>(cfg, gen);
    examples::ParallelizeGpt(*gpt, mesh, {.sequence_parallel = c.sp});
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(Opt::kAdamW, gpt->NamedParameters());
    const int64_t dp_rank = world->rank() / c.tp;
    const Device d = CurrentDevice();
    for (int step = 0; step < 3; ++step) {
      if (step == 2) memory::ResetPeaks(d);
      auto [idx, tgt] = GlobalBatch(cfg, step, kGlobalBatch);
      Backward(gpt->Loss(RowsFor(idx, dp_rank, c.dp_shard), RowsFor(tgt, dp_rank, c.dp_shard)));
      opt->Step();
      opt->ZeroGrad();
    }
    out[static_cast<size_t>(world->rank())] = planner::MeasuredPeaks(memory::Stats(d));
  }, FastRanks());
  return out;
}

class TpMemoryTest : public ::testing::TestWithParam<Case> {};

TEST_P(TpMemoryTest, EveryLedgerOfEveryRankMatchesThePlan) {
  const Case c = GetParam();
  const nn::GPTConfig cfg = MemoryGpt();
  const std::vector<LedgerPlan> measured = Measure(c, cfg);
  for (int r = 0; r < static_cast<int>(measured.size()); ++r) {
    SCOPED_TRACE(r);
    const LedgerPlan want = planner::PlanRank(planner::FromGptConfig(cfg), LayoutOf(c, cfg), r).ledgers;
    const LedgerPlan& got = measured[static_cast<size_t>(r)];
    std::printf("  %s rank %d (bytes)\n", c.name, r);
    ExpectLedgerNear("params", got.params, want.params, 0.0);
    ExpectLedgerNear("grads", got.grads, want.grads, 0.0);
    ExpectLedgerNear("optim", got.optim, want.optim, 0.0);
    ExpectLedgerNear("comm", got.comm, want.comm, 0.0);
    ExpectLedgerNear("activations", got.activations, want.activations, c.activations_tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, TpMemoryTest,
                         ::testing::Values(Case{"tp2", 1, 2, false, 0.05}, Case{"tp2_sp", 1, 2, true, 0.05},
                                           Case{"dp2_tp2", 2, 2, false, 0.09}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessel::fsdp::testing
