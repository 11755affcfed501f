// tests/checkpoint_fsdp_test.cc — distributed checkpoints of fully_shard'ed training (checkpoint/ + fsdp/):
// a 4-rank FullyShard GPT + AdamW + LR schedule saved at step k and resumed reproduces the uninterrupted
// run bit for bit; the same checkpoint loads into a hand-built tensor-parallel layout on 2 ranks and into
// one dense rank with every FullTensor bitwise equal, and the dense rank trains on within fp32 tolerance.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/elementwise.h"
#include "tests/fsdp_testing.h"

namespace tessel {
namespace {

using checkpoint::StateDict;
using fsdp::testing::FastRanks;
using fsdp::testing::FullValues;
using fsdp::testing::GlobalBatch;
using fsdp::testing::RowsFor;
using fsdp::testing::TinyGpt;

constexpr int kSteps = 5, kSaveAt = 2;
constexpr int64_t kBatch = 8;
const optim::WarmupCosineSchedule kSchedule{.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 1, .total_steps = kSteps};

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / name;
  std::filesystem::remove_all(p);
  return p.string();
}

// One training step on this rank's rows of the global batch (world == nullptr: the whole batch);
// returns the global mean loss.
double Step(nn::GPT& gpt, optim::Optimizer& opt, int step, const comm::ProcessGroupPtr& world) {
  auto [idx, tgt] = GlobalBatch(TinyGpt(), step, kBatch);
  if (world) {
    idx = RowsFor(idx, world->rank(), world->size());
    tgt = RowsFor(tgt, world->rank(), world->size());
  }
  Tensor loss = gpt.Loss(idx, tgt);
  Backward(loss);
  opt.set_lr(kSchedule.LrAt(step));
  opt.Step();
  opt.ZeroGrad();
  Tensor l = Full({1}, loss.item<double>(), DType::kFloat64);
  if (world) world->AllReduce(l, comm::ReduceOp::kAvg)->Wait();
  return l.item<double>();
}

// Every parameter and optimizer state tensor as full values, by checkpoint key.
std::map<std::string, std::vector<double>> FullState(nn::GPT& gpt, optim::Optimizer& opt) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [fqn, p] : gpt.NamedParameters()) out[fqn] = FullValues(p);
  for (const auto& [fqn, s] : opt.GetStateDict().state) {
    for (const auto& [name, t] : s) out["optim.state." + fqn + "." + name] = FullValues(t);
  }
  return out;
}

StateDict TrainingState(nn::GPT& gpt, optim::Optimizer& opt, int64_t step) {
  StateDict sd = checkpoint::GetModelStateDict(gpt);
  sd.merge(checkpoint::GetOptimizerStateDict(gpt, opt));
  sd["train.step"] = step;  // the LR schedule and the data stream are functions of the step
  return sd;
}

TEST(CheckpointFsdpTest, FullyShardResumeOnFourRanksIsBitwise) {
  const std::string dir = FreshDir("ckpt_fsdp_resume");
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {4}, {"dp"});
        Generator g1(7), g2(7), g3(99);
        nn::GPT straight(TinyGpt(), g1), first(TinyGpt(), g2), resumed(TinyGpt(), g3);
        for (nn::GPT* m : {&straight, &first, &resumed}) fsdp::testing::WrapGpt(*m, mesh);
        auto opt_straight = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, straight.NamedParameters());
        auto opt_first = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, first.NamedParameters());
        auto opt_resumed = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, resumed.NamedParameters());
        std::vector<double> losses;
        for (int s = 0; s < kSteps; ++s) losses.push_back(Step(straight, *opt_straight, s, world));
        for (int s = 0; s < kSaveAt; ++s) Step(first, *opt_first, s, world);
        checkpoint::Save(TrainingState(first, *opt_first, kSaveAt), dir, world, {.fsync = false});

        StateDict sd = TrainingState(resumed, *opt_resumed, 0);  // fresh optimizer: zero state in FSDP layout
        checkpoint::Load(sd, dir);
        checkpoint::SetOptimizerStateDict(resumed, *opt_resumed, sd);
        for (int s = static_cast<int>(std::get<int64_t>(sd.at("train.step"))); s < kSteps; ++s) {
          EXPECT_EQ(Step(resumed, *opt_resumed, s, world), losses[static_cast<size_t>(s)]) << "step " << s;
        }
        EXPECT_TRUE(FullState(resumed, *opt_resumed) == FullState(straight, *opt_straight));
      },
      FastRanks());
}

// After a no-grad forward (evaluation) the root keeps its parameters gathered, as no backward follows to
// reshard them. A state dict taken then read those unsharded plain tensors, in bf16 under mixed precision,
// and a load wrote into buffers the next reshard dropped. The state-dict pre-hooks point the module back
// at its fp32 Shard(0) parameters first, as PyTorch's do.
TEST(CheckpointFsdpTest, StateDictAfterANoGradForwardIsTheShardedFp32State) {
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
        Generator gen(7);
        nn::GPT gpt(TinyGpt(), gen);
        const fsdp::FullyShardOptions bf16{.mp_policy = {.param_dtype = DType::kBFloat16}};
        fsdp::testing::WrapGpt(gpt, mesh, bf16, bf16);
        auto opt = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, gpt.NamedParameters());
        Step(gpt, *opt, 0, world);
        const auto wte = [&] {
          for (const auto& [fqn, p] : gpt.NamedParameters()) {
            if (fqn == "wte.weight") return p;
          }
          return Tensor();
        };
        ASSERT_TRUE(wte().is_distributed());  // resharded after backward
        const std::vector<double> before = FullValues(wte());
        auto [idx, tgt] = GlobalBatch(TinyGpt(), 1, kBatch);
        const auto forward = [&] { return gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2)); };
        {
          NoGradGuard eval;
          forward();
        }
        ASSERT_FALSE(wte().is_distributed());  // the root stays gathered, in bf16
        StateDict sd = checkpoint::GetModelStateDict(gpt);
        for (const auto& [fqn, v] : sd) {
          const Tensor& t = std::get<Tensor>(v);
          EXPECT_TRUE(t.is_distributed()) << fqn;
          EXPECT_EQ(t.dtype(), DType::kFloat32) << fqn;
        }
        EXPECT_EQ(FullValues(std::get<Tensor>(sd.at("wte.weight"))), before);
        // A load after another eval forward lands in the sharded parameters the optimizer steps, and the
        // next forward gathers the loaded values.
        nn::StateDict halves;
        for (const auto& [fqn, v] : sd) halves.emplace_back(fqn, MulScalar(std::get<Tensor>(v), 0.5));
        {
          NoGradGuard eval;
          forward();
        }
        ASSERT_FALSE(wte().is_distributed());
        gpt.LoadStateDict(halves);
        std::vector<double> want = before;
        for (double& x : want) x *= 0.5;
        EXPECT_EQ(FullValues(wte()), want);
        forward();
        const std::vector<double> gathered = FullValues(wte());  // bf16: within its rounding of the loaded values
        ASSERT_EQ(gathered.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(gathered[i], want[i], std::abs(want[i]) / 256) << i;
        EXPECT_EQ(FullValues(std::get<Tensor>(checkpoint::GetModelStateDict(gpt).at("wte.weight"))), want);
      },
      FastRanks());
}

// Colwise (S(0)) q/k/v/fc, rowwise (S(1)) wo/proj, the rest replicated: a Megatron-style TP layout.
dtensor::Placement TpPlacement(const std::string& fqn) {
  for (const char* col : {"attn.wq.", "attn.wk.", "attn.wv.", "mlp.fc."}) {
    if (fqn.find(col) != std::string::npos) return dtensor::Shard{0};
  }
  for (const char* row : {"attn.wo.", "mlp.proj."}) {
    if (fqn.find(row) != std::string::npos) return dtensor::Shard{1};
  }
  return dtensor::Replicate{};
}

TEST(CheckpointFsdpTest, FullyShardCheckpointLoadsIntoTensorParallelAndDenseLayouts) {
  const std::string dir = FreshDir("ckpt_fsdp_layouts");
  std::map<std::string, std::vector<double>> saved;
  std::vector<double> continued;  // the FSDP run's losses after the save
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {4}, {"dp"});
        Generator gen(7);
        nn::GPT gpt(TinyGpt(), gen);
        fsdp::testing::WrapGpt(gpt, mesh);
        auto opt = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, gpt.NamedParameters());
        for (int s = 0; s < kSaveAt; ++s) Step(gpt, *opt, s, world);
        checkpoint::Save(TrainingState(gpt, *opt, kSaveAt), dir, world, {.fsync = false});
        auto full = FullState(gpt, *opt);
        std::vector<double> losses;
        for (int s = kSaveAt; s < kSteps; ++s) losses.push_back(Step(gpt, *opt, s, world));
        if (world->rank() == 0) {
          saved = std::move(full);
          continued = std::move(losses);
        }
      },
      FastRanks());

  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {  // tensor parallel on 2 ranks
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
        Generator gen(5);
        nn::GPT shapes(TinyGpt(), gen);
        auto opt = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, shapes.NamedParameters());
        StateDict sd = TrainingState(shapes, *opt, 0);
        for (auto& [key, v] : sd) {
          if (Tensor* t = std::get_if<Tensor>(&v))
            *t = dtensor::DistributeTensor(Zeros(t->sizes()), mesh, {TpPlacement(key)});
        }
        checkpoint::Load(sd, dir);  // strict: same keys, other layout
        for (const auto& [key, values] : saved) EXPECT_EQ(FullValues(std::get<Tensor>(sd.at(key))), values) << key;
      },
      FastRanks());

  Generator gen(5);  // one dense rank: load, then train on the whole global batch
  nn::GPT dense(TinyGpt(), gen);
  auto opt = fsdp::testing::MakeOptimizer(fsdp::testing::Opt::kAdamW, dense.NamedParameters());
  StateDict sd = TrainingState(dense, *opt, 0);
  checkpoint::Load(sd, dir);
  checkpoint::SetOptimizerStateDict(dense, *opt, sd);
  EXPECT_TRUE(FullState(dense, *opt) == saved);
  for (int s = kSaveAt; s < kSteps; ++s) {
    const double want = continued[static_cast<size_t>(s - kSaveAt)];
    EXPECT_NEAR(Step(dense, *opt, s, nullptr), want, 1e-5 * std::abs(want)) << "step " << s;
  }
}

}  // namespace
}  // namespace tessel
