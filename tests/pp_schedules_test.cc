// tests/pp_schedules_test.cc — every pipeline schedule, on 2 and 4 ranks of the threads backend, trains a
// tiny GPT 10 steps to the same losses and final parameters as one rank (fp32, 1e-5 relative), and the
// in-flight microbatch peaks it measures equal the simulator's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "comm/backends/threads.h"
#include "core/autograd/engine.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "pipelining/pipeline_gpt.h"
#include "pipelining/simulator.h"

namespace tessel::pipelining {
namespace {

constexpr int kSteps = 10;
constexpr int64_t kBatch = 8;
constexpr uint64_t kSeed = 17;
constexpr double kLr = 0.2;

nn::GPTConfig Config() {
  return {.vocab_size = 16, .d_model = 16, .n_layers = 8, .n_heads = 2, .seq_len = 4, .bias = true};
}

std::pair<Tensor, Tensor> Batch(int step) {
  Generator g(1000 + step);
  Tensor idx = Randint(0, 16, std::vector<int64_t>{kBatch, 4}, g);
  Tensor tgt = Randint(0, 16, std::vector<int64_t>{kBatch, 4}, g);
  return {idx, tgt};
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

const Trained& Reference() {
  static const Trained ref = [] {
    Trained t;
    Generator gen(kSeed);
    nn::GPT gpt(Config(), gen);
    optim::SGD opt(gpt.NamedParameters(), {.lr = kLr});
    for (int step = 0; step < kSteps; ++step) {
      auto [idx, tgt] = Batch(step);
      Tensor loss = gpt.Loss(idx, tgt);
      t.losses.push_back(loss.item<double>());
      Backward(loss);
      opt.Step();
      opt.ZeroGrad();
    }
    for (auto& [fqn, p] : gpt.NamedParameters()) t.params[fqn] = p.ToVector<float>();
    return t;
  }();
  return ref;
}

struct Row {
  const char* name;
  ScheduleKind kind;
  int num_ranks;
  int num_microbatches;
  int stages_per_rank;  // 0: PipelineGPT's default
};

class PipelineScheduleTest : public ::testing::TestWithParam<Row> {};

TEST_P(PipelineScheduleTest, TrainsTenStepsToTheOneRankLossesAndParameters) {
  const Row row = GetParam();
  Trained got;
  std::mutex mu;
  comm::RunRanks(row.num_ranks, [&](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), kSeed, pg,
                                  {.kind = row.kind, .num_microbatches = row.num_microbatches,
                                   .stages_per_rank = row.stages_per_rank});
    const SimulationResult sim = Simulate(pp.lowered, pp.stage_to_rank);
    optim::SGD opt(pp.NamedParameters(), {.lr = kLr});
    for (int step = 0; step < kSteps; ++step) {
      auto [idx, tgt] = Batch(step);
      const StepStats st = pp.executor->Step(idx, tgt);
      opt.Step();
      opt.ZeroGrad();
      for (size_t i = 0; i < pp.stages.size(); ++i) {
        const int s = pp.stages[i]->stage_index();
        EXPECT_EQ(st.peak_in_flight[i], sim.peak_in_flight[s]) << "stage " << s << " step " << step;
      }
      std::lock_guard<std::mutex> lock(mu);
      if (st.loss) got.losses.push_back(*st.loss);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [fqn, p] : pp.NamedParameters()) {
      EXPECT_TRUE(got.params.emplace(fqn, p.ToVector<float>()).second) << fqn << " on two ranks";
    }
  });
  const Trained& ref = Reference();
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(got.losses[step], ref.losses[step], 1e-5 * std::abs(ref.losses[step])) << "step " << step;
  }
  ASSERT_EQ(got.params.size(), ref.params.size());
  for (const auto& [fqn, want] : ref.params) {
    ASSERT_TRUE(got.params.count(fqn)) << fqn;
    const std::vector<float>& have = got.params.at(fqn);
    float scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      err = std::max(err, std::abs(have[i] - want[i]));
    }
    // Relative to the tensor's largest entry; the absolute floor covers the attention key biases, whose
    // gradient is mathematically zero (softmax ignores a per-query constant) and whose values are rounding.
    EXPECT_LE(err, 1e-5 * scale + 1e-9) << fqn << ": max |pipelined - one rank| relative to the tensor's max";
  }
}

std::vector<Row> Rows() {
  std::vector<Row> rows;
  for (int p : {2, 4}) {
    const int m = 2 * p;
    rows.push_back({"GPipe", ScheduleKind::kGPipe, p, m, 0});
    rows.push_back({"1F1B", ScheduleKind::k1F1B, p, m, 0});
    rows.push_back({"Interleaved1F1B", ScheduleKind::kInterleaved1F1B, p, m, 2});
    rows.push_back({"LoopedBFS", ScheduleKind::kLoopedBFS, p, m, 2});
    rows.push_back({"ZBH1", ScheduleKind::kInterleavedZeroBubble, p, m, 1});
    rows.push_back({"InterleavedZeroBubble", ScheduleKind::kInterleavedZeroBubble, p, m, 2});
    rows.push_back({"ZBVZeroBubble", ScheduleKind::kZBVZeroBubble, p, m, 2});
    rows.push_back({"DualPipeV", ScheduleKind::kDualPipeV, p, m, 2});
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineScheduleTest, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return std::string(info.param.name) + "On" + std::to_string(info.param.num_ranks) +
                                  "Ranks";
                         });

}  // namespace
}  // namespace tessel::pipelining
