// checkpoint/resume_test.cc — the acceptance test of the issue: GPT + AdamW + warmup/cosine LR trained
// to step k, saved, and resumed in a fresh process state reproduces the uninterrupted run bit for bit
// (losses, parameters, optimizer state, LR, data position); resumed in another layout every FullTensor
// equals the saved one and training continues within fp32 tolerance.
//
// Multi-rank runs are data parallel with hand-written gradient averaging (dense replicas, so no DTensor
// op is needed for the optimizer step); the cross-layout checks load that checkpoint into DTensors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/nn/transformer.h"
#include "core/ops/concat.h"
#include "core/optim/optimizer.h"
#include "dtensor/dtensor.h"

namespace tessel::checkpoint {
namespace {

using testing::DenseBytes;
using testing::FreshDir;

constexpr int64_t kBatch = 2, kSteps = 6, kSaveAt = 3;
const nn::GPTConfig kConfig{.vocab_size = 32, .d_model = 16, .n_layers = 2, .n_heads = 2, .seq_len = 8};
const optim::WarmupCosineSchedule kSchedule{.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = kSteps};

// One training process: model, optimizer, LR schedule position and data stream position.
struct Trainer {
  explicit Trainer(uint64_t init_seed, uint64_t data_seed) : data(data_seed) {
    Generator gen(init_seed);
    model = std::make_unique<nn::GPT>(kConfig, gen);
    opt = std::make_unique<optim::AdamW>(model->NamedParameters(), optim::AdamWOptions{.lr = 1e-2});
  }
  struct Batch {
    Tensor idx, targets;
  };
  Batch Next() {
    const Shape shape = {kBatch, kConfig.seq_len};
    Tensor idx = Randint(0, kConfig.vocab_size, shape, data);
    return {idx, Randint(0, kConfig.vocab_size, shape, data)};
  }
  // One step on `b`; `world` (optional) averages gradients across data-parallel replicas.
  float Step(const Batch& b, const comm::ProcessGroupPtr& world = nullptr) {
    Tensor loss = model->Loss(b.idx, b.targets);
    Backward(loss);
    if (world) {
      for (const Tensor& p : model->Parameters()) world->AllReduce(p.grad(), comm::ReduceOp::kAvg)->Wait();
    }
    optim::ClipGradNorm(model->Parameters(), 1.0);
    opt->set_lr(kSchedule.LrAt(step));
    opt->Step();
    opt->ZeroGrad();
    ++step;
    return loss.item<float>();
  }
  StateDict State(const std::string& rng_key) {
    StateDict sd = GetModelStateDict(*model);
    sd.merge(GetOptimizerStateDict(*model, *opt));
    sd["train.step"] = step;
    sd[rng_key] = GeneratorToBytes(data);
    return sd;
  }
  void Restore(const StateDict& sd, const std::string& rng_key) {
    SetOptimizerStateDict(*model, *opt, sd);
    step = std::get<int64_t>(sd.at("train.step"));
    data = GeneratorFromBytes(std::get<Bytes>(sd.at(rng_key)));
  }
  std::map<std::string, std::string> Snapshot() const {  // every parameter and optimizer tensor, as bytes
    std::map<std::string, std::string> out;
    for (const auto& [fqn, p] : model->NamedParameters()) out[fqn] = DenseBytes(p);
    for (const auto& [fqn, s] : opt->GetStateDict().state) {
      for (const auto& [name, t] : s) out["optim." + fqn + "." + name] = DenseBytes(t);
    }
    return out;
  }

  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  Generator data;
  int64_t step = 0;
};

TEST(ResumeTest, SingleRankResumeReproducesTheUninterruptedRunBitwise) {
  Trainer straight(7, 1234);
  std::vector<float> losses;
  for (int64_t s = 0; s < kSteps; ++s) losses.push_back(straight.Step(straight.Next()));

  const std::string dir = FreshDir("resume_single");
  {
    Trainer first(7, 1234);
    for (int64_t s = 0; s < kSaveAt; ++s) first.Step(first.Next());
    Save(first.State("train.data_rng"), dir);
  }
  Trainer resumed(99, 1);  // different init and data seed: everything must come from the checkpoint
  StateDict sd = resumed.State("train.data_rng");
  Load(sd, dir);
  resumed.Restore(sd, "train.data_rng");
  EXPECT_EQ(resumed.step, kSaveAt);
  for (int64_t s = kSaveAt; s < kSteps; ++s) {
    EXPECT_EQ(resumed.Step(resumed.Next()), losses[static_cast<size_t>(s)]) << "step " << s;
  }
  EXPECT_EQ(resumed.opt->lr(), straight.opt->lr());
  EXPECT_EQ(resumed.opt->GetStateDict().steps, straight.opt->GetStateDict().steps);
  EXPECT_TRUE(resumed.Snapshot() == straight.Snapshot());
}

std::string RngKey(int rank) { return Str("train.data_rng.rank", rank); }

// Two data-parallel ranks: an uninterrupted run, and a run saved at kSaveAt and resumed from the
// checkpoint; done once for the suite, whose tests then read the checkpoint in other layouts.
class DataParallelResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = FreshDir("resume_dp");
    mean_losses_.assign(kSteps, 0.0f);
    comm::RunRanks(2, RunRank, testing::TestRanks());
  }
  static void RunRank(comm::ProcessGroupPtr world) {
    const int r = world->rank();
    Trainer straight(7, 1234 + static_cast<uint64_t>(r));
    for (int64_t s = 0; s < kSteps; ++s) {
      Tensor l = Full({1}, straight.Step(straight.Next(), world));
      world->AllReduce(l, comm::ReduceOp::kAvg)->Wait();
      if (r == 0) mean_losses_[static_cast<size_t>(s)] = l.item<float>();
    }
    Trainer first(7, 1234 + static_cast<uint64_t>(r));
    for (int64_t s = 0; s < kSaveAt; ++s) first.Step(first.Next(), world);
    Save(first.State(RngKey(r)), dir_, world, {.fsync = false});
    Trainer resumed(99, 1);
    StateDict sd = resumed.State(RngKey(r));
    sd[RngKey(1 - r)] = Bytes{};
    Load(sd, dir_);
    resumed.Restore(sd, RngKey(r));
    for (int64_t s = kSaveAt; s < kSteps; ++s) resumed.Step(resumed.Next(), world);
    resumed_equal_[static_cast<size_t>(r)] = resumed.Snapshot() == straight.Snapshot();
    if (r == 0) saved_state_ = first.Snapshot();
  }

  static inline std::string dir_;
  static inline std::vector<float> mean_losses_;
  static inline std::map<std::string, std::string> saved_state_;
  static inline bool resumed_equal_[2] = {false, false};
};

TEST_F(DataParallelResumeTest, ResumedRanksMatchTheUninterruptedRunBitwise) {
  EXPECT_TRUE(resumed_equal_[0]);
  EXPECT_TRUE(resumed_equal_[1]);
}

TEST_F(DataParallelResumeTest, FourRanksOnA2DMeshSeeEverySavedTensorBitwise) {
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const testing::Layout l{4, {2, 2}, "S(0), R"};
        const auto mesh = testing::MakeMesh(world, l);
        Trainer shape_only(5, 5);
        StateDict sd;  // every parameter and optimizer tensor as a DTensor
        for (auto& [key, v] : shape_only.State("unused")) {
          if (const Tensor* t = std::get_if<Tensor>(&v)) sd[key] = testing::Place(Zeros(t->sizes()), mesh, l);
        }
        Load(sd, dir_, {.strict = false});
        for (const auto& [key, v] : sd) {
          const std::string name = key.rfind("optim.state.", 0) == 0 ? "optim." + key.substr(12) : key;
          EXPECT_EQ(DenseBytes(dtensor::DTensor(std::get<Tensor>(v)).FullTensor()), saved_state_.at(name)) << key;
        }
      },
      testing::TestRanks());
}

TEST_F(DataParallelResumeTest, OneRankContinuesTrainingWithinFp32Tolerance) {
  Trainer single(99, 1);
  StateDict sd = single.State(RngKey(0));
  sd[RngKey(1)] = Bytes{};
  Load(sd, dir_);
  single.Restore(sd, RngKey(0));
  std::vector<Generator> rng = {GeneratorFromBytes(std::get<Bytes>(sd[RngKey(0)])),
                                GeneratorFromBytes(std::get<Bytes>(sd[RngKey(1)]))};
  for (int64_t s = kSaveAt; s < kSteps; ++s) {  // both replicas' batches at once
    Trainer::Batch parts[2];
    for (int r = 0; r < 2; ++r) {
      single.data = rng[static_cast<size_t>(r)];
      parts[r] = single.Next();
      rng[static_cast<size_t>(r)] = single.data;
    }
    const float loss = single.Step({Cat({parts[0].idx, parts[1].idx}), Cat({parts[0].targets, parts[1].targets})});
    const float want = mean_losses_[static_cast<size_t>(s)];
    EXPECT_NEAR(loss, want, 1e-5 * std::abs(want)) << "step " << s;
  }
}

}  // namespace
}  // namespace tessel::checkpoint
