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

// Stage 1 fails in the forward of microbatch 1 and its rank catches the error and steps again, while rank 0
// is still inside the first step. Neither rank waits out the 60 s timeout:
// - GPipe: stage 1 still holds microbatch 0's forward, so its second step raises at once and the rank
//   leaves; rank 0's pending send then fails naming the rank that left.
// - 1F1B: microbatch 0 had its backward, so the second step starts and waits for microbatch 0's input,
//   while rank 0 waits to hand over microbatch 2 of the first step: each rank's p2p thread waits for a post
//   the other will never make, and both raise the deadlock naming both ops.
TEST(PipelineErrorsTest, RetryingAStepOnOneRankAfterAnErrorFailsEveryRankAtOnce) {
  for (const ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    std::mutex mu;
    std::map<int, std::string> messages;  // "<code name>: <message>"
    comm::RunRanksOptions options;
    options.timeout = std::chrono::milliseconds(60'000);
    const auto start = std::chrono::steady_clock::now();
    comm::RunRanks(
        2,
        [&](comm::ProcessGroupPtr pg) {
          RankPipeline pp = PipelineGPT(Config(), 1, pg, {.kind = kind, .num_microbatches = 4});
          try {
            if (pg->rank() == 1) {
              auto calls = std::make_shared<int>(0);
              pp.modules[0]->RegisterForwardPreHook([calls](nn::Module&, TensorList&) {
                TESSEL_CHECK(++*calls != 3, "injected failure");  // call 1 is the shape handshake
              });
              ExpectErrorContains([&] { pp.executor->Step(Tokens(8), Tokens(8)); }, ErrorCode::kInvalidArgument,
                                  {"pipeline rank 1, action 1F1", "injected failure"});
            }
            pp.executor->Step(Tokens(8), Tokens(8));
            ADD_FAILURE() << "rank " << pg->rank() << " finished a step its peer abandoned";
          } catch (const Error& e) {
            std::lock_guard<std::mutex> lock(mu);
            messages[pg->rank()] = Str(ErrorCodeName(e.code()), ": ", e.what());
          }
        },
        options);
    const std::string name(ScheduleName(kind));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << name;
    ASSERT_EQ(messages.size(), 2u) << name;
    if (kind == ScheduleKind::kGPipe) {
      EXPECT_EQ(messages[1].rfind("FAILED_PRECONDITION: pipeline stage 1 (rank 1) microbatch 0: the last step left "
                                  "it without backward (a step that raised midway cannot be run again", 0), 0u)
          << messages[1];
      EXPECT_EQ(messages[0].rfind("ABORTED: pipeline rank 0, action ", 0), 0u) << messages[0];
      EXPECT_NE(messages[0].find("rank 1 (global 1) already returned from RunRanks"), std::string::npos)
          << messages[0];
      continue;
    }
    for (const auto& [rank, message] : messages) {
      EXPECT_EQ(message.rfind(Str("ABORTED: pipeline rank ", rank, ", action "), 0), 0u) << message;
      for (const char* part : {"deadlock: rank 0 waits in send to rank 1 (tag ", "; rank 1 waits in recv from rank 0",
                               "which has not posted its side", "a rank left a step of sends and receives midway"}) {
        EXPECT_NE(message.find(part), std::string::npos) << name << ", rank " << rank << ": " << message;
      }
    }
  }
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

// Targets split unlike the inputs (8 rows in microbatches of 3, 3, 2 beside 4 in 2, 1, 1): an error naming both splits
// on the last stage's rank, before any communication (the loss would pair outputs with other rows' targets, silently
// where it broadcasts). Targets whose rows split in proportion (e.g. [B * T] beside [B, T]) pass, as in torch.
TEST(PipelineErrorsTest, TargetsSplitUnlikeTheInputsAreInvalidArgument) {
  comm::RunRanks(1, [](comm::ProcessGroupPtr pg) {
    RankPipeline pp = PipelineGPT(Config(), 1, pg, {.kind = ScheduleKind::kGPipe, .num_microbatches = 3});
    ExpectErrorContains([&] { pp.executor->Step(Tokens(8), Tokens(4)); }, ErrorCode::kInvalidArgument,
                        "pipeline rank 0: the inputs [8, 4] split into microbatches of [3, 3, 2] rows and the targets "
                        "[4, 4] into [2, 1, 1]: microbatch 0's targets are not its inputs' rows");
  });
}

}  // namespace
}  // namespace tessel::pipelining
