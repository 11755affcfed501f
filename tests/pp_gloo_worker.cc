// tests/pp_gloo_worker.cc — runs in every process of a tessel-run job (//tests:pp_gloo_test): the pipeline
// executor, unchanged, on the multi-process gloo backend. 1F1B, Interleaved1F1B and ZBVZeroBubble train the
// tiny GPT 10 steps to the one-rank run's losses and parameters (each process checks its own stages
// against a reference it computes itself).
#include <gtest/gtest.h>

#include <chrono>

#include "comm/backends/gloo.h"
#include "pipelining/pipeline_gpt.h"
#include "tests/pp_testing.h"

namespace tessel::pipelining {
namespace {

comm::ProcessGroupPtr World() {
  static comm::ProcessGroupPtr pg = [] {
    comm::ProcessGroupPtr p = comm::InitProcessGroupFromEnv();
    p->set_timeout(std::chrono::milliseconds(30000));
    return p;
  }();
  return pg;
}

void TrainAndCompare(ScheduleKind kind) {
  comm::ProcessGroupPtr pg = World();
  RankPipeline pp = PipelineGPT(pp_testing::Config(), pp_testing::kSeed, pg,
                                {.kind = kind, .num_microbatches = 2 * pg->size()});
  optim::SGD opt(pp.NamedParameters(), {.lr = pp_testing::kLr});
  std::vector<double> losses;
  for (int step = 0; step < pp_testing::kSteps; ++step) {
    auto [idx, tgt] = pp_testing::Batch(step);
    const StepStats st = pp.executor->Step(idx, tgt);
    opt.Step();
    opt.ZeroGrad();
    if (st.loss) losses.push_back(*st.loss);
  }
  EXPECT_EQ(losses.empty(), !pp.stages.back()->is_last());
  std::map<std::string, std::vector<float>> params;
  for (auto& [fqn, p] : pp.NamedParameters()) params[fqn] = p.ToVector<float>();
  EXPECT_FALSE(params.empty());
  pp_testing::ExpectMatchesReference(losses, params, /*complete=*/pg->size() == 1);
}

TEST(PipelineGlooTest, OneFOneBTrainsToTheOneRankRun) { TrainAndCompare(ScheduleKind::k1F1B); }
TEST(PipelineGlooTest, Interleaved1F1BTrainsToTheOneRankRun) { TrainAndCompare(ScheduleKind::kInterleaved1F1B); }
TEST(PipelineGlooTest, ZBVZeroBubbleTrainsToTheOneRankRun) { TrainAndCompare(ScheduleKind::kZBVZeroBubble); }

}  // namespace
}  // namespace tessel::pipelining
