// tests/pp_errors_test.cc — a pipeline never hangs and says where it broke: a rank that fails mid-step makes
// every rank raise, each naming the failing stage and action; bad schedules and batches are clear errors.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "comm/backends/threads.h"
#include "core/base/testing/expect_error.h"
#include "core/tensor/random.h"
#include "pipelining/pipeline_gpt.h"

namespace tessel::pipelining {
namespace {

using testing::ExpectErrorContains;

nn::GPTConfig Config() {
  return {.vocab_size = 16, .d_model = 16, .n_layers = 4, .n_heads = 2, .seq_len = 4};
}

Tensor Tokens(int64_t rows) {
  Generator g(5);
  return Randint(0, 16, std::vector<int64_t>{rows, 4}, g);
}

TEST(PipelineErrorsTest, FailingStageRaisesOnEveryRankNamingTheStageAndAction) {
  std::mutex mu;
  std::map<int, std::string> messages;
  comm::RunRanksOptions options;
  options.timeout = std::chrono::milliseconds(60'000);  // the abort, not the timeout, must end the wait
  const auto start = std::chrono::steady_clock::now();
  ExpectErrorContains(
      [&] {
        comm::RunRanks(
            2,
            [&](comm::ProcessGroupPtr pg) {
              RankPipeline pp = PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::k1F1B, .num_microbatches = 4});
              if (pg->rank() == 1) {
                // Stage 1 fails in its forward of microbatch 2.
                auto calls = std::make_shared<int>(0);
                pp.modules[0]->RegisterForwardPreHook([calls](nn::Module&, TensorList&) {
                  TESSEL_CHECK(++*calls != 4, "injected failure");  // call 1 is the shape handshake
                });
              }
              try {
                pp.executor->Step(Tokens(8), Tokens(8));
              } catch (const Error& e) {
                std::lock_guard<std::mutex> lock(mu);
                messages[pg->rank()] = e.what();
                throw;
              }
            },
            options);
      },
      ErrorCode::kInvalidArgument, {"pipeline rank 1, action 1F2", "injected failure"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_EQ(messages.size(), 2u) << "every rank raises";
  EXPECT_NE(messages[0].find("pipeline rank 0, action"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("pipeline rank 1, action 1F2: "), std::string::npos) << messages[0];
}

TEST(PipelineErrorsTest, ScheduleShapesThatDoNotFitAreInvalidArgument) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    ExpectErrorContains(
        [&] { PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::kZBVZeroBubble, .num_microbatches = 4,
                                            .stages_per_rank = 1}); },
        ErrorCode::kInvalidArgument, "ZBVZeroBubble");
    ExpectErrorContains(
        [&] { PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::kInterleaved1F1B, .num_microbatches = 5}); },
        ErrorCode::kInvalidArgument, "Interleaved1F1B");
    nn::GPTConfig tied = Config();
    tied.tie_embeddings = true;
    ExpectErrorContains([&] { PipelineGPT(tied, 1, pg, {.num_microbatches = 2}); }, ErrorCode::kUnimplemented,
                        "tie_embeddings");
  });
}

TEST(PipelineErrorsTest, ProgramActionOnAStageOfAnotherRankIsInvalidArgument) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::kGPipe, .num_microbatches = 2});
    std::vector<PipelineStage*> stages = {pp.stages[0].get()};
    const RankProgram wrong = ParseRankProgram(pg->rank() == 0 ? "0F0,1F0" : "1F0,1F1,1B1,1B0");
    if (pg->rank() == 0) {
      ExpectErrorContains([&] { PipelineExecutor(stages, wrong, 2); }, ErrorCode::kInvalidArgument,
                          "action 1F0 names stage 1, which this rank (0) does not hold");
    } else {
      ExpectErrorContains([&] { PipelineExecutor(stages, ParseRankProgram("1F2"), 2); }, ErrorCode::kInvalidArgument,
                          "action 1F2 is outside the 2 microbatches");
    }
  });
}

// A program lowered for 2 microbatches given to an executor that splits the batch into 4 ran microbatches 0
// and 1 only, weighted 1/4 each: half the batch's gradient and loss, with no error.
TEST(PipelineErrorsTest, ProgramThatSkipsOrRepeatsAMicrobatchIsInvalidArgument) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::kGPipe, .num_microbatches = 2});
    std::vector<PipelineStage*> stages = {pp.stages[0].get()};
    const int s = pg->rank();
    const std::string two = Str(s, "F0,", s, "F1,", s, "B1,", s, "B0");
    ExpectErrorContains([&] { PipelineExecutor(stages, ParseRankProgram(two), 4); }, ErrorCode::kInvalidArgument,
                        {Str("stage ", s, " runs microbatch 2 0x forward, 0x B"), "every one of the 4 microbatches"});
    const std::string twice = Str(s, "F0,", s, "F1,", s, "B1,", s, "B0,", s, "B0");
    ExpectErrorContains([&] { PipelineExecutor(stages, ParseRankProgram(twice), 2); }, ErrorCode::kInvalidArgument,
                        {"runs microbatch 0 1x forward, 2x B"});
    PipelineExecutor ok(stages, ParseRankProgram(two), 2);  // the matching count is accepted
  });
}

TEST(PipelineErrorsTest, BatchSmallerThanTheMicrobatchCountIsInvalidArgumentOnEveryRank) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::kGPipe, .num_microbatches = 4});
    ExpectErrorContains([&] { pp.executor->Step(Tokens(3), Tokens(3)); }, ErrorCode::kInvalidArgument,
                        "cannot fill 4 microbatches");
  });
}

}  // namespace
}  // namespace tessel::pipelining
