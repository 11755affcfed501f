// pipelining/schedules_test.cc — the schedule generators: exact small programs, every kind on many shapes
// passes the verifier (compute-only and lowered), DualPipeV equals PyTorch's reference, and bad shapes are
// rejected with the schedule name and the numbers.
#include "pipelining/schedules.h"

#include <gtest/gtest.h>

#include "core/base/testing/expect_error.h"
#include "pipelining/lowering.h"
#include "pipelining/schedule_csv.h"
#include "pipelining/verifier.h"

namespace tessel::pipelining {
namespace {

using ::tessel::testing::ExpectErrorContains;

std::vector<std::string> Rows(const Program& p) {
  std::vector<std::string> rows;
  for (const RankProgram& r : p) rows.push_back(ToString(r));
  return rows;
}

using Rows_ = std::vector<std::string>;

TEST(SchedulesTest, NamesRoundTripCaseInsensitively) {
  for (ScheduleKind k : AllScheduleKinds()) {
    EXPECT_EQ(ParseScheduleKind(ScheduleName(k)), k);
  }
  EXPECT_EQ(ParseScheduleKind("zbvzerobubble"), ScheduleKind::kZBVZeroBubble);
  EXPECT_EQ(ParseScheduleKind("1f1b"), ScheduleKind::k1F1B);
  ExpectErrorContains([] { ParseScheduleKind("2F2B"); }, ErrorCode::kInvalidArgument,
                      {"unknown pipeline schedule '2F2B'", "GPipe, 1F1B, Interleaved1F1B", "DualPipeV"});
}

TEST(SchedulesTest, LoopedPlacementCyclesStagesOverRanks) {
  EXPECT_EQ(StageToRankMap(StagePlacement::kLooped, 2, 6), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(StagesOfRank(StagePlacement::kLooped, 1, 2, 6), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(StageToRankMap(ScheduleKind::k1F1B, 4, 4), (std::vector<int>{0, 1, 2, 3}));
}

TEST(SchedulesTest, VPlacementFoldsTheSecondHalfBack) {
  EXPECT_EQ(StageToRankMap(StagePlacement::kV, 2, 4), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(StageToRankMap(ScheduleKind::kZBVZeroBubble, 4, 8), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(StagesOfRank(StagePlacement::kV, 1, 4, 8), (std::vector<int>{1, 6}));
  ExpectErrorContains([] { StageToRank(StagePlacement::kV, 0, 2, 6); }, ErrorCode::kInvalidArgument,
                      "V placement needs 2 stages per rank, got 6 stages on 2 ranks");
  ExpectErrorContains([] { StageToRank(StagePlacement::kLooped, 4, 2, 4); }, ErrorCode::kOutOfRange,
                      "stage 4 out of range [0, 4)");
}

TEST(SchedulesTest, OneFOneBWarmsUpThenAlternates) {
  EXPECT_EQ(Rows(GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 4)),
            (Rows_{"0F0,0F1,,0B0,0F2,0B1,0F3,0B2,,0B3", ",1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3"}));
}

TEST(SchedulesTest, GPipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(Rows(GenerateSchedule(ScheduleKind::kGPipe, 2, 2, 3)),
            (Rows_{"0F0,0F1,0F2,,,0B0,0B1,0B2", ",1F0,1F1,1F2,1B0,1B1,1B2"}));
}

TEST(SchedulesTest, InterleavedAndLoopedBfsDifferInBackwardOrder) {
  EXPECT_EQ(Rows(GenerateSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 2)),
            (Rows_{"0F0,0F1,2F0,2F1,,2B0,,2B1,0B0,0B1", ",1F0,1F1,3F0,3B0,3F1,3B1,1B0,1B1"}));
  EXPECT_EQ(Rows(GenerateSchedule(ScheduleKind::kLoopedBFS, 2, 4, 2)),
            (Rows_{"0F0,0F1,2F0,2F1,,,2B1,2B0,0B1,0B0", ",1F0,1F1,3F0,3F1,3B1,3B0,1B1,1B0"}));
}

TEST(SchedulesTest, ZeroBubbleSplitsBackwardAndDelaysWeights) {
  EXPECT_EQ(Rows(GenerateSchedule(ScheduleKind::kInterleavedZeroBubble, 2, 2, 3)),
            (Rows_{"0F0,0F1,,0I0,0W0,0F2,0I1,0W1,0I2,0W2", ",1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1W2"}));
  EXPECT_EQ(Rows(GenerateSchedule(ScheduleKind::kZBVZeroBubble, 2, 4, 2)),
            (Rows_{"0F0,0F1,,3F0,3I0,3W0,3F1,3I1,3W1,0I0,0W0,,0I1,0W1",
                   ",1F0,2F0,1F1,2F1,2I0,2W0,1I0,1W0,2I1,2W1,1I1,1W1"}));
}

// PyTorch's test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv with each overlapped pair
// (a;b)OVERLAP_F_B written as a then b (tessel's IR has no overlapped action; see schedules.cc).
TEST(SchedulesTest, DualPipeVMatchesPyTorchReferenceWithOverlapsExpanded) {
  const Program expected = ParseCsv(
      "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,0F7,7B3,7F4,0B0,0F8,7B4,7F5,0B1,0F9,7B5,"
      "7F6,0B2,7B6,7F7,0B3,7B7,7F8,0B4,7B8,7F9,0B5,7B9,0I6,0W6,0I7,0W7,0I8,0W8,0I9,0W9\n"
      "1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,1F6,6B2,6F4,1B0,1F7,6B3,6F5,1B1,1F8,6B4,6F6,1B2,1F9,"
      "6B5,6F7,1B3,6B6,6F8,1B4,6B7,6F9,1B5,6B8,1B6,6I9,1I7,6W9,1I8,1W7,1I9,1W8,1W9\n"
      "2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,2F5,5B1,5F4,2B0,2F6,5B2,5F5,2B1,2F7,5B3,5F6,2B2,2F8,5B4,5F7,2B3,"
      "2F9,5B5,5F8,2B4,5B6,5F9,2B5,5B7,2B6,5B8,2I7,5I9,2I8,2W7,2I9,5W9,2W8,2W9\n"
      "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,4F4,3B0,3F5,4B1,4F5,3B1,3F6,4B2,4F6,3B2,3F7,4B3,4F7,3B3,3F8,4B4,4F8,"
      "3B4,3F9,4B5,4F9,3B5,4B6,3B6,4B7,3B7,4I8,3I8,4I9,3I9,4W8,3W8,4W9,3W9\n");
  const Program actual = GenerateSchedule(ScheduleKind::kDualPipeV, 4, 8, 10);
  ASSERT_EQ(actual.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ToString(WithoutIdle(actual[r])), ToString(expected[r])) << "rank " << r;
}

struct Case {
  ScheduleKind kind;
  int p, v, m;
};

std::vector<Case> ValidCases() {
  std::vector<Case> cases;
  for (ScheduleKind k : AllScheduleKinds()) {
    for (int p : {1, 2, 3, 4}) {
      for (int v : {1, 2, 3}) {
        for (int m = 1; m <= 9; ++m) {
          const bool single = k == ScheduleKind::kGPipe || k == ScheduleKind::k1F1B;
          const bool vee = k == ScheduleKind::kZBVZeroBubble || k == ScheduleKind::kDualPipeV;
          const bool rounds = k == ScheduleKind::kInterleaved1F1B || k == ScheduleKind::kInterleavedZeroBubble;
          if ((single && v != 1) || (vee && v != 2) || (rounds && m % std::max(1, m / p) != 0)) continue;
          if (k == ScheduleKind::kDualPipeV && m < 2 * p) continue;
          cases.push_back({k, p, v, m});
        }
      }
    }
  }
  return cases;
}

TEST(SchedulesTest, EveryKindVerifiesAndLowersOnManyShapes) {
  const std::vector<Case> cases = ValidCases();
  EXPECT_EQ(cases.size(), 422u);  // guards the case filter above against silently testing nothing
  for (const Case& c : cases) {
    SCOPED_TRACE(Str(ScheduleName(c.kind), " p=", c.p, " v=", c.v, " m=", c.m));
    const Program compute = GenerateSchedule(c.kind, c.p, c.p * c.v, c.m);
    ASSERT_EQ(compute.size(), static_cast<size_t>(c.p));
    const std::vector<int> where = VerifyComputeProgram(compute, c.p * c.v, c.m);
    EXPECT_EQ(where, StageToRankMap(c.kind, c.p, c.p * c.v));
    EXPECT_EQ(CountActions(compute, [](const Action& a) { return a.kind == ActionKind::kForward; }),
              c.p * c.v * c.m);
    const bool split = CountActions(compute, [](const Action& a) { return a.kind == ActionKind::kBackwardInput; }) > 0;
    if (c.kind != ScheduleKind::kDualPipeV) EXPECT_EQ(split, UsesSplitBackward(c.kind));
    for (bool fsdp : {false, true}) {
      VerifyLoweredProgram(LowerProgram(compute, where, c.m, {.fsdp = fsdp}), where, c.m);
    }
  }
}

TEST(SchedulesTest, BadShapesNameTheScheduleAndTheNumbers) {
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 5); }, ErrorCode::kInvalidArgument,
                      {"Interleaved1F1B requires the number of microbatches to be a multiple of the number of rounds 2",
                       "got 5 microbatches on 2 ranks"});
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kInterleavedZeroBubble, 4, 8, 9); },
                      ErrorCode::kInvalidArgument, {"InterleavedZeroBubble requires", "rounds 2", "got 9 microbatches on 4 ranks"});
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kZBVZeroBubble, 2, 6, 4); }, ErrorCode::kInvalidArgument,
                      "ZBVZeroBubble requires exactly 2 stages per rank, got 3 (6 stages on 2 ranks)");
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kZBVZeroBubble, 2, 2, 4); }, ErrorCode::kInvalidArgument,
                      "ZBVZeroBubble requires exactly 2 stages per rank, got 1");
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::k1F1B, 2, 4, 4); }, ErrorCode::kInvalidArgument,
                      "1F1B requires exactly 1 stage per rank, got 2 (4 stages on 2 ranks)");
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kLoopedBFS, 2, 5, 4); }, ErrorCode::kInvalidArgument,
                      "LoopedBFS requires the number of stages (5) to be a multiple of the number of ranks (2)");
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kDualPipeV, 4, 8, 7); }, ErrorCode::kInvalidArgument,
                      "DualPipeV requires at least as many microbatches as stages, got 7 microbatches for 8 stages");
  ExpectErrorContains([] { GenerateSchedule(ScheduleKind::kGPipe, 2, 2, 0); }, ErrorCode::kInvalidArgument,
                      "GPipe: needs at least one rank, stage and microbatch, got 2 ranks, 2 stages, 0 microbatches");
}

}  // namespace
}  // namespace tessel::pipelining
