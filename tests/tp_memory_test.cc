// tests/tp_memory_test.cc — the memory plan of tensor parallelism held by the measurement: a small GPT
// trained 3 steps under examples/gpt/parallelize's recipe on the threads backend — TP 2, TP 2 +
// sequence parallelism, 2-D (dp_shard 2, tp 2), loss parallelism, and the main job's default size
// (examples/gpt/train.cc: d_model 128, 4 layers, seq 64, batch 16, vocab 256, TP 2 + SP + loss parallel)
// — and each rank's steady-state peak of every ledger (the third step: optimizer state exists, gradients
// were zeroed) against planner::PlanRank: params, grads, optimizer state, comm buffers and activations
// all to the byte. Vocabularies and widths are chosen so that each backward moment of
// planner/activations.h sets the activations peak somewhere: cross-entropy's (vocab 128; vocab 512 with
// d_model 32 under loss parallelism, where the vocab-sharded loss's own transients decide), the head's
// (vocab 8, d_model 32) and the last GELU block's (vocab 8, d_model 128).
#include <gtest/gtest.h>

#include <optional>

#include "core/memory/allocator.h"
#include "planner/planner.h"
#include "tests/tp_gpt_testing.h"

namespace tessel::fsdp::testing {
namespace {

using planner::LedgerPlan;

nn::GPTConfig MemoryGpt(int64_t vocab, int64_t d_model) {
  return nn::GPTConfig{.vocab_size = vocab, .d_model = d_model, .n_layers = 4, .n_heads = 4, .seq_len = 16};
}
nn::GPTConfig MainJobGpt() {  // examples/gpt/train.cc's defaults
  return nn::GPTConfig{.vocab_size = 256, .d_model = 128, .n_layers = 4, .n_heads = 4, .seq_len = 64};
}

struct Case {
  const char* name;
  int64_t dp_shard, tp;
  bool sp, loss_parallel;
  nn::GPTConfig cfg;
  int64_t global_batch = 4;
};

planner::Layout LayoutOf(const Case& c) {
  return planner::Layout{.dp_shard = c.dp_shard, .zero_stage = c.dp_shard > 1 ? 3 : 0, .tp = c.tp,
                         .sequence_parallel = c.sp, .loss_parallel = c.loss_parallel,
                         .param_dtype = DType::kFloat32, .reduce_dtype = DType::kFloat32,
                         .global_batch = c.global_batch, .seq_len = c.cfg.seq_len};
}

std::vector<LedgerPlan> Measure(const Case& c) {
  const nn::GPTConfig& cfg = c.cfg;
  const int world_size = static_cast<int>(c.dp_shard * c.tp);
  std::vector<LedgerPlan> out(static_cast<size_t>(world_size));
  comm::RunRanks(world_size, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = c.dp_shard == 1 ? dtensor::InitDeviceMesh(world, {c.tp}, {"tp"})
                                                     : dtensor::InitDeviceMesh(world, {c.dp_shard, c.tp}, {"dp", "tp"});
    Generator gen(7);
    auto gpt = std::make_unique<nn::GPT>(cfg, gen);
    examples::ParallelizeGpt(*gpt, mesh, {.sequence_parallel = c.sp, .loss_parallel = c.loss_parallel});
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(Opt::kAdamW, gpt->NamedParameters());
    const int64_t dp_rank = world->rank() / c.tp;
    const Device d = CurrentDevice();
    for (int step = 0; step < 3; ++step) {
      if (step == 2) memory::ResetPeaks(d);
      auto [idx, tgt] = GlobalBatch(cfg, step, c.global_batch);
      {
        std::optional<tp::LossParallel> loss_parallel;  // vocab-sharded logits: the loss inside the scope
        if (c.loss_parallel) loss_parallel.emplace();
        Backward(gpt->Loss(RowsFor(idx, dp_rank, c.dp_shard), RowsFor(tgt, dp_rank, c.dp_shard)));
      }
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
  const std::vector<LedgerPlan> measured = Measure(c);
  for (int r = 0; r < static_cast<int>(measured.size()); ++r) {
    SCOPED_TRACE(r);
    const LedgerPlan want = planner::PlanRank(planner::FromGptConfig(c.cfg), LayoutOf(c), r).ledgers;
    const LedgerPlan& got = measured[static_cast<size_t>(r)];
    // Every ledger is exact (bytes).
    EXPECT_EQ(got.params, want.params) << c.name;
    EXPECT_EQ(got.grads, want.grads) << c.name;
    EXPECT_EQ(got.optim, want.optim) << c.name;
    EXPECT_EQ(got.comm, want.comm) << c.name;
    EXPECT_EQ(got.activations, want.activations) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TpMemoryTest,
    ::testing::Values(Case{"tp2", 1, 2, false, false, MemoryGpt(128, 64)},
                      Case{"tp2_sp", 1, 2, true, false, MemoryGpt(128, 64)},
                      Case{"dp2_tp2", 2, 2, false, false, MemoryGpt(128, 64)},
                      Case{"dp2_tp2_sp_loss_parallel", 2, 2, true, true, MemoryGpt(128, 64)},
                      Case{"tp2_sp_loss_parallel_cross_entropy_moment", 1, 2, true, true, MemoryGpt(512, 32)},
                      Case{"tp2_head_moment", 1, 2, false, false, MemoryGpt(8, 32)},
                      Case{"tp2_sp_head_moment", 1, 2, true, false, MemoryGpt(8, 32)},
                      Case{"tp2_block_moment", 1, 2, false, false, MemoryGpt(8, 128)},
                      Case{"tp2_sp_block_moment", 1, 2, true, false, MemoryGpt(8, 128)},
                      Case{"dp2_tp2_block_moment", 2, 2, false, false, MemoryGpt(8, 128)},
                      Case{"main_job_tp2_sp_loss_parallel", 1, 2, true, true, MainJobGpt(), 16},
                      Case{"main_job_dp2_tp2_sp_loss_parallel", 2, 2, true, true, MainJobGpt(), 16},
                      Case{"main_job_tp2", 1, 2, false, false, MainJobGpt(), 16}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessel::fsdp::testing
