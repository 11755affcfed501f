// tests/fsdp_memory_test.cc — the memory ledger of FullyShard training: planner/memory_plan.h's
// prediction (derived from the model config and the layout math, [Note: FSDP layout]) held against
// the allocator's measured per-rank peaks, every ledger, for W = 1, 2, 4.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/memory/allocator.h"
#include "planner/memory_plan.h"
#include "planner/planner.h"
#include "tests/fsdp_testing.h"

namespace tessel::fsdp::testing {
namespace {

using planner::LedgerPlan;
using planner::MeasureGptActivations;
using planner::PlanGptFullyShard;

// vocab 127: wte and lm_head are uneven over W = 2 and 4, so ranks hold different amounts of state.
nn::GPTConfig MemoryGpt() {
  return nn::GPTConfig{.vocab_size = 127, .d_model = 64, .n_layers = 4, .n_heads = 4, .seq_len = 32};
}
constexpr int64_t kLocalBatch = 2;

// Peaks of rank `rank` over the third training step (optimizer state exists, gradients were zeroed),
// on a 1-D mesh ("dp") or, with `replicate` > 1, an HSDP mesh (dp_replicate, dp_shard).
std::vector<LedgerPlan> Measure(const nn::GPTConfig& cfg, int world_size, int replicate = 1) {
  std::vector<LedgerPlan> out(static_cast<size_t>(world_size));
  comm::RunRanks(world_size, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = replicate == 1 ? dtensor::InitDeviceMesh(world, {world_size}, {"dp"})
                                              : dtensor::InitDeviceMesh(world, {replicate, world_size / replicate},
                                                                        {"dp_replicate", "dp_shard"});
    Generator gen(7);
    auto gpt = std::make_unique<nn::GPT>(cfg, gen);
    WrapGpt(*gpt, mesh);
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(Opt::kAdamW, gpt->NamedParameters());
    const Device d = CurrentDevice();
    for (int step = 0; step < 3; ++step) {
      if (step == 2) memory::ResetPeaks(d);
      auto [idx, tgt] = GlobalBatch(cfg, step, kLocalBatch * world_size);
      Backward(gpt->Loss(RowsFor(idx, world->rank(), world_size), RowsFor(tgt, world->rank(), world_size)));
      opt->Step();
      opt->ZeroGrad();
    }
    out[static_cast<size_t>(world->rank())] = planner::MeasuredPeaks(memory::Stats(d));
  }, FastRanks());
  return out;
}


// fully_shard over one dp_shard axis of `world` ranks, fp32 everything, as Measure runs it.
planner::Layout FsdpLayout(const nn::GPTConfig& cfg, int world) {
  return planner::Layout{.dp_shard = world, .zero_stage = 3, .param_dtype = DType::kFloat32,
                         .reduce_dtype = DType::kFloat32, .global_batch = kLocalBatch * world, .seq_len = cfg.seq_len};
}

class FsdpMemoryTest : public ::testing::TestWithParam<int> {};

TEST_P(FsdpMemoryTest, MeasuredPeaksMatchThePredictionWithinTenPercent) {
  const int world = GetParam();
  const nn::GPTConfig cfg = MemoryGpt();
  static const int64_t activations = MeasureGptActivations(cfg, kLocalBatch);
  const std::vector<LedgerPlan> measured = Measure(cfg, world);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(r);
    const LedgerPlan want = PlanGptFullyShard(cfg, world, r, activations);
    // The planner's front door gives this exact plan for plain fully_shard of a GPT config.
    const planner::RankPlan front = planner::PlanRank(planner::FromGptConfig(cfg), FsdpLayout(cfg, world), r, activations);
    EXPECT_TRUE(front.exact);
    EXPECT_EQ(front.ledgers.total, want.total);
    EXPECT_EQ(front.ledgers.params, want.params);
    // Without the measurement, its analytic activations (tessel's saved tensors) give the same plan.
    const planner::RankPlan unmeasured = planner::PlanRank(planner::FromGptConfig(cfg), FsdpLayout(cfg, world), r);
    EXPECT_FALSE(unmeasured.activations_measured);
    EXPECT_EQ(unmeasured.ledgers.activations, want.activations);
    EXPECT_EQ(unmeasured.ledgers.total, want.total);
    const LedgerPlan& got = measured[static_cast<size_t>(r)];
    std::printf("  W=%d rank %d (bytes)\n", world, r);
    ExpectLedgerNear("params", got.params, want.params, 0.10);
    ExpectLedgerNear("grads", got.grads, want.grads, 0.10);
    ExpectLedgerNear("optim", got.optim, want.optim, 0.10);
    ExpectLedgerNear("comm", got.comm, want.comm, 0.10);
    ExpectLedgerNear("activations", got.activations, want.activations, 0.10);
    ExpectLedgerNear("total", got.total, want.total, 0.10);
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FsdpMemoryTest, ::testing::Values(1, 2, 4));

// HSDP on (dp_replicate 2, dp_shard 2): every ledger as the plan of the shard axis (W = 2) says, to the
// byte — the replicate axis's all-reduce runs in place on the reduce-scatter output.
TEST(FsdpMemoryTest, HsdpTwoByTwoMeasuredLedgersMatchThePlanExactly) {
  const nn::GPTConfig cfg = MemoryGpt();
  const std::vector<LedgerPlan> measured = Measure(cfg, 4, /*replicate=*/2);
  planner::Layout hsdp = FsdpLayout(cfg, 4);
  hsdp.dp_replicate = 2;
  hsdp.dp_shard = 2;
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const LedgerPlan want = planner::PlanRank(planner::FromGptConfig(cfg), hsdp, r).ledgers;
    const LedgerPlan& got = measured[static_cast<size_t>(r)];
    std::printf("  HSDP 2x2 rank %d (bytes)\n", r);
    ExpectLedgerNear("params", got.params, want.params, 0.0);
    ExpectLedgerNear("grads", got.grads, want.grads, 0.0);
    ExpectLedgerNear("optim", got.optim, want.optim, 0.0);
    ExpectLedgerNear("comm", got.comm, want.comm, 0.0);
    ExpectLedgerNear("activations", got.activations, want.activations, 0.0);
    ExpectLedgerNear("total", got.total, want.total, 0.01);  // the plan's total is approximate (as for W = 2)
  }
}

TEST(FsdpMemoryTest, ShardedStateShrinksWithTheWorldSize) {
  const nn::GPTConfig cfg = MemoryGpt();
  const int64_t full = cfg.NumParameters() * 4;
  for (int world : {1, 2, 4}) {
    const std::vector<LedgerPlan> m = Measure(cfg, world);
    // Optimizer state is exactly 2x the rank's shard: about 2 * full / W, never more than 2 * padded.
    EXPECT_LE(m[0].optim, 2 * full / world + 2 * 4 * 64 * 5) << world;
    EXPECT_GE(m[0].optim, 2 * full / world - 2 * 4 * 64 * 5) << world;
  }
}

}  // namespace
}  // namespace tessel::fsdp::testing
