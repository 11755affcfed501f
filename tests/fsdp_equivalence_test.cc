// tests/fsdp_equivalence_test.cc — numerics parity of FullyShard training against one-rank training
// (STYLE 26): one named row per mesh / option combination, 10 AdamW steps of a tiny GPT whose
// parameters include dim 0 not divisible by W (vocab 37) and smaller than W (wpe [3, C]).
//
// Tolerances (norm-wise relative, fsdp_testing.h RelErr): fp32 1e-5 per step (losses) and on the final
// parameters with SGD + momentum; the sharded run differs only in the order of the gradient average.
// AdamW: losses 1e-5, parameters 1e-4 (it divides each update by the RMS of its gradient, amplifying the
// rounding of near-cancelling entries). bf16 parameters with fp32 reduction, against the fp32 run:
// losses within 1e-2, parameters within 5e-2 (bf16 keeps 8 mantissa bits, 4e-3 relative per rounding,
// and the parameters initialized at zero are made of 10 updates computed from bf16 activations).
#include <gtest/gtest.h>

#include "tests/fsdp_testing.h"

namespace tessel::fsdp::testing {
namespace {

constexpr int kSteps = 10;
constexpr int64_t kBatch = 12;  // divisible by 1, 2, 3 and 4

const RunResult& Reference() {
  static const RunResult ref = TrainReference(TinyGpt(), kSteps, kBatch);
  return ref;
}

TEST(FsdpEquivalenceTest, ReferenceLossDecreases) {
  const RunResult& ref = Reference();
  EXPECT_LT(ref.losses.back(), ref.losses.front());
}

class FsdpWorldSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(FsdpWorldSizeTest, TrainingMatchesOneRankWithinFp32Tolerance) {
  const RunResult got = TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = GetParam()});
  ExpectRunsClose(got, Reference(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FsdpWorldSizeTest, ::testing::Values(1, 2, 3, 4));

TEST(FsdpEquivalenceTest, AdamWOnShardsMatchesOneRank) {
  static const RunResult ref = TrainReference(TinyGpt(), kSteps, kBatch, Opt::kAdamW);
  const RunResult got = TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 4, .optimizer = Opt::kAdamW});
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * ref.losses[s]);
  for (const auto& [fqn, values] : ref.params) EXPECT_LE(RelErr(got.params.at(fqn), values), 1e-4) << fqn;
}

TEST(FsdpEquivalenceTest, CoreOptimizersStepTheShardedDTensorParametersDirectly) {
  // No alias shim: optim::AdamW runs adamw_step_foreach_ on the DTensor parameters (each rank its shards).
  static const RunResult ref = TrainReference(TinyGpt(), 3, kBatch, Opt::kAdamW);
  std::vector<double> losses;
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    std::unique_ptr<optim::Optimizer> opt = MakeOptimizer(Opt::kAdamW, gpt.NamedParameters());
    for (int s = 0; s < 3; ++s) {
      auto [idx, tgt] = GlobalBatch(TinyGpt(), s, kBatch);
      Tensor loss = gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2));
      Backward(loss);
      opt->Step();
      opt->ZeroGrad();
    }
    for (const auto& [fqn, state] : opt->GetStateDict().state) {
      for (const auto& [name, t] : state) EXPECT_TRUE(t.is_distributed()) << fqn << " " << name;
    }
    const auto params = FullParams(gpt);
    for (const auto& [fqn, values] : ref.params) EXPECT_LE(RelErr(params.at(fqn), values), 1e-4) << fqn;
  }, FastRanks());
}

// requires_grad is read live from the sharded parameter the user holds: freezing a weight after fully_shard
// leaves its .grad undefined (it used to be computed, reduced and written), and unfreezing one that was
// frozen before fully_shard gives it a gradient (it used to stay without one), both as on one rank.
TEST(FsdpEquivalenceTest, FreezingOrUnfreezingAfterFullyShardMatchesOneRank) {
  const auto named = [](nn::Module& m, const std::string& fqn) {
    for (const auto& [name, p] : m.NamedParameters()) {
      if (name == fqn) return p;
    }
    return Tensor();
  };
  const std::string frozen = "layers.0.attn.wq.weight", thawed = "layers.1.mlp.fc.weight";
  std::map<std::string, std::vector<double>> ref_grads;
  {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    named(gpt, frozen).set_requires_grad(false);
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, kBatch);
    Backward(gpt.Loss(idx, tgt));
    for (const auto& [fqn, p] : gpt.NamedParameters()) {
      if (p.grad().defined()) ref_grads[fqn] = p.grad().ToDoubleVector();
    }
  }
  ASSERT_EQ(ref_grads.count(frozen), 0u);
  ASSERT_EQ(ref_grads.count(thawed), 1u);
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    named(gpt, thawed).set_requires_grad(false);  // frozen before fully_shard, unfrozen after
    WrapGpt(gpt, mesh);
    named(gpt, frozen).set_requires_grad(false);
    named(gpt, thawed).set_requires_grad(true);
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, kBatch);
    Backward(gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2)));
    for (const auto& [fqn, p] : gpt.NamedParameters()) {
      const auto want = ref_grads.find(fqn);
      ASSERT_EQ(p.grad().defined(), want != ref_grads.end()) << fqn;
      if (p.grad().defined()) EXPECT_LE(RelErr(FullValues(p.grad()), want->second), 1e-5) << fqn;
    }
  }, FastRanks());
}

TEST(FsdpEquivalenceTest, TiedEmbeddingsShareOneShardedParameter) {
  nn::GPTConfig cfg = TinyGpt();
  cfg.tie_embeddings = true;  // lm_head reuses wte.weight: one FsdpParam, gradients from both uses
  const RunResult ref = TrainReference(cfg, kSteps, kBatch);
  const RunResult got = TrainFsdp(cfg, kSteps, kBatch, {.world = 3});
  ExpectRunsClose(got, ref, 1e-5);
}

TEST(FsdpEquivalenceTest, HsdpTwoByTwoMatchesOneRank) {
  const RunResult got =
      TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 4, .mesh_shape = {2, 2}, .axis_names = {"replicate", "shard"}});
  ExpectRunsClose(got, Reference(), 1e-5);
}

// torch's replicate_with_fsdp: replicate_axis alone (whole parameters, gradients all-reduced) on 3 ranks.
TEST(FsdpEquivalenceTest, ReplicateOnlyMatchesOneRank) {
  const FullyShardOptions replicate{.replicate_axis = "replicate"};
  const RunResult got = TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 3, .axis_names = {"replicate"},
                                                              .block_options = replicate, .root_options = replicate});
  ExpectRunsClose(got, Reference(), 1e-5);
}

TEST(FsdpEquivalenceTest, NoReshardAfterForwardMatchesOneRank) {
  FullyShardOptions keep;
  keep.reshard_after_forward = false;
  const RunResult got = TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 2, .block_options = keep});
  ExpectRunsClose(got, Reference(), 1e-5);
}

TEST(FsdpEquivalenceTest, OffloadPolicyIsANoOpOnCpu) {
  FullyShardOptions offload;
  offload.offload_policy = CPUOffloadPolicy{.pin_memory = true};
  const RunResult got =
      TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 2, .block_options = offload, .root_options = offload});
  ExpectRunsClose(got, Reference(), 1e-5);
  EXPECT_EQ(memory::Stats(Device::Cpu(0))[memory::Ledger::kOffloaded].peak, 0);
}

TEST(FsdpEquivalenceTest, Bf16ParamsWithFp32ReduceStayCloseToFp32) {
  FullyShardOptions mp;
  mp.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32};
  FullyShardOptions root_mp = mp;
  root_mp.mp_policy.output_dtype = DType::kFloat32;  // logits in fp32 for the loss
  const RunResult got = TrainFsdp(TinyGpt(), kSteps, kBatch, {.world = 2, .block_options = mp, .root_options = root_mp});
  const double worst = ExpectRunsClose(got, Reference(), 1e-2, 5e-2);
  EXPECT_GT(worst, 1e-4) << "bf16 compute should be visible; the fp32 run matches within 1e-5";
}

}  // namespace
}  // namespace tessel::fsdp::testing
