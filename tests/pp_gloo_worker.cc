// tests/pp_gloo_worker.cc — runs in every process of a tessel-run job (//tests:pp_gloo_test): the pipeline
// executor, unchanged, on the multi-process gloo backend. 1F1B, Interleaved1F1B and ZBVZeroBubble train the
// tiny GPT 10 steps to the one-rank run's losses and parameters (each process checks its own stages
// against a reference it computes itself).
#include <gtest/gtest.h>

#include <chrono>

#include "comm/backends/gloo.h"
#include "core/base/error.h"
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

// 2 processes, 1F1B with 4 microbatches: stage 1 fails in the forward of microbatch 1 and its process catches
// the error and steps again (microbatch 0 finished, so the step starts), while rank 0 is still inside the
// first step. Rank 0's p2p queue waits in a batch (a later microbatch's activation to send, microbatch 1's
// input gradient to receive), rank 1's for microbatch 0's input of the new step, which rank 0 sends only
// after that batch: the monitors find the cycle through the store and both raise kAborted naming it, well
// before the 30 s timeout.
TEST(PipelineGlooTest, RetryingAStepOnOneProcessAfterAnErrorIsADeadlockOnBoth) {
  if (World()->size() != 2) GTEST_SKIP() << "written for 2 ranks";
  comm::ProcessGroupPtr pg = World()->NewGroup({0, 1});  // fresh: the deadlock breaks it
  RankPipeline pp = PipelineGPT(pp_testing::Config(), pp_testing::kSeed, pg,
                                {.kind = ScheduleKind::k1F1B, .num_microbatches = 4});
  auto [idx, tgt] = pp_testing::Batch(0);
  if (pg->rank() == 1) {
    auto calls = std::make_shared<int>(0);
    pp.modules[0]->RegisterForwardPreHook([calls](nn::Module&, TensorList&) {
      TESSEL_CHECK(++*calls != 3, "injected failure");  // call 1 is the shape handshake
    });
    try {
      pp.executor->Step(idx, tgt);
      ADD_FAILURE() << "the injected failure did not raise";
    } catch (const tessel::Error& e) {
      EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
    }
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    pp.executor->Step(idx, tgt);
    ADD_FAILURE() << "rank " << pg->rank() << " finished a step its peer abandoned";
  } catch (const tessel::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), tessel::ErrorCode::kAborted) << what;
    for (const std::string& part :
         {Str("pipeline rank ", pg->rank(), ", action "), std::string("deadlock: rank 0 waits in "),
          std::string("for rank 1, which has not posted its side; rank 1 waits in recv from rank 0"),
          std::string("a rank left a step of sends and receives")}) {
      EXPECT_NE(what.find(part), std::string::npos) << what;
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  World()->Barrier()->Wait();
}

// Last test of the file (gtest keeps definition order; gloo_test.sh gives the launcher a long --exit-grace-s):
// the last stage's process dies between steps (no destructor, like kill -9 after a step), and every other
// rank's next pipeline step fails at once (kAborted naming the action and the closed connection: p2p on gloo
// reports a closed peer as the collectives do), instead of waiting out the 30 s group timeout.
TEST(PipelineGlooTest, StageProcessThatDiedFailsTheOtherRanksNextStepAtOnce) {
  comm::ProcessGroupPtr pg = World();
  if (pg->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  RankPipeline pp = PipelineGPT(pp_testing::Config(), pp_testing::kSeed, pg,
                                {.kind = ScheduleKind::k1F1B, .num_microbatches = 2 * pg->size()});
  auto [idx, tgt] = pp_testing::Batch(0);
  pp.executor->Step(idx, tgt);
  pg->Barrier()->Wait();
  const int last = pg->size() - 1;
  if (pg->rank() == last) std::_Exit(0);
  const auto start = std::chrono::steady_clock::now();
  try {
    pp.executor->Step(idx, tgt);
    ADD_FAILURE() << "the step completed without the last stage";
  } catch (const tessel::Error& e) {
    // The last stage's neighbour names it; ranks further up name the neighbour that failed and exited.
    const std::string closed = pg->rank() == last - 1 ? Str("the connection to rank ", last, " (global ", last, ") closed")
                                                      : std::string("closed (the process exited or died)");
    EXPECT_EQ(e.code(), tessel::ErrorCode::kAborted) << e.what();
    EXPECT_NE(std::string(e.what()).find(Str("pipeline rank ", pg->rank(), ", action ")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(closed), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
}  // namespace tessel::pipelining
