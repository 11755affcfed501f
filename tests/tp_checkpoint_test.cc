// tests/tp_checkpoint_test.cc — a checkpoint of 2-D FSDP x TP training (examples/gpt/parallelize on
// (dp, tp) = (2, 2), sequence + loss parallel, AdamW) loads bitwise — every parameter and optimizer
// state tensor, as full values — into one dense rank, into fully_shard on 4 ranks and into TP on 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "tests/tp_gpt_testing.h"

namespace tessel::fsdp::testing {
namespace {

using checkpoint::StateDict;
using FullStateMap = std::map<std::string, std::vector<double>>;

constexpr int kSteps = 3;
constexpr int64_t kBatch = 4;
const examples::GptParallelism kSpLp{.sequence_parallel = true, .loss_parallel = true};

nn::GPTConfig Cfg() {
  return nn::GPTConfig{.vocab_size = 37, .d_model = 16, .n_layers = 2, .n_heads = 4, .seq_len = 4};
}

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / name;
  std::filesystem::remove_all(p);
  return p.string();
}

FullStateMap FullState(nn::GPT& gpt, optim::Optimizer& opt) {
  FullStateMap out;
  for (const auto& [fqn, p] : gpt.NamedParameters()) out[fqn] = FullValues(p);
  for (const auto& [fqn, s] : opt.GetStateDict().state) {
    for (const auto& [name, t] : s) out["optim.state." + fqn + "." + name] = FullValues(t);
  }
  return out;
}

StateDict TrainingState(nn::GPT& gpt, optim::Optimizer& opt) {
  StateDict sd = checkpoint::GetModelStateDict(gpt);
  sd.merge(checkpoint::GetOptimizerStateDict(gpt, opt));
  return sd;
}

// Loads `dir` into a fresh GPT (another seed) laid out by `layout`; returns rank 0's full state.
FullStateMap LoadInto(const std::string& dir, int world,
                      const std::function<void(nn::GPT&, const comm::ProcessGroupPtr&)>& layout) {
  FullStateMap got;
  std::mutex mu;
  auto body = [&](const comm::ProcessGroupPtr& pg) {
    Generator gen(99);
    nn::GPT gpt(Cfg(), gen);
    if (layout) layout(gpt, pg);
    auto opt = MakeOptimizer(Opt::kAdamW, gpt.NamedParameters());
    StateDict sd = TrainingState(gpt, *opt);  // fresh optimizer: zero state in this layout
    checkpoint::Load(sd, dir);
    checkpoint::SetOptimizerStateDict(gpt, *opt, sd);
    FullStateMap mine = FullState(gpt, *opt);
    if (!pg || pg->rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      got = std::move(mine);
    }
  };
  if (world == 1) {
    body(nullptr);
  } else {
    comm::RunRanks(
        world, [&](comm::ProcessGroupPtr pg) { body(pg); }, FastRanks());
  }
  return got;
}

TEST(TpCheckpointTest, TwoDimensionalCheckpointLoadsBitwiseIntoOneRankFullyShardAndTensorParallel) {
  const std::string dir = FreshDir("ckpt_tp_2d");
  FullStateMap saved;
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
        Generator gen(7);
        nn::GPT gpt(Cfg(), gen);
        examples::ParallelizeGpt(gpt, mesh, kSpLp);
        auto opt = MakeOptimizer(Opt::kAdamW, gpt.NamedParameters());
        for (int s = 0; s < kSteps; ++s) TpStep(gpt, *opt, Cfg(), s, kBatch, kSpLp, mesh.axis_group("dp"));
        checkpoint::Save(TrainingState(gpt, *opt), dir, world, {.fsync = false});
        FullStateMap full = FullState(gpt, *opt);
        if (world->rank() == 0) saved = std::move(full);
      },
      FastRanks());
  ASSERT_FALSE(saved.empty());
  EXPECT_GT(saved.size(), Cfg().ParameterShapes().size());  // optimizer state is in there too

  EXPECT_TRUE(LoadInto(dir, 1, nullptr) == saved) << "one dense rank";
  EXPECT_TRUE(LoadInto(dir, 4,
                       [](nn::GPT& gpt, const comm::ProcessGroupPtr& pg) {
                         WrapGpt(gpt, dtensor::InitDeviceMesh(pg, {4}, {"dp"}));
                       }) == saved)
      << "fully_shard on 4";
  EXPECT_TRUE(LoadInto(dir, 2,
                       [](nn::GPT& gpt, const comm::ProcessGroupPtr& pg) {
                         examples::ParallelizeGpt(gpt, dtensor::InitDeviceMesh(pg, {2}, {"tp"}), kSpLp);
                       }) == saved)
      << "TP on 2";
}

}  // namespace
}  // namespace tessel::fsdp::testing
