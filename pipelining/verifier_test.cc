// pipelining/verifier_test.cc — broken programs are rejected before anything runs, naming the first bad action
// and its rank and step; well-formed ones pass.
#include "pipelining/verifier.h"

#include <gtest/gtest.h>

#include <random>

#include "core/base/testing/expect_error.h"
#include "pipelining/lowering.h"
#include "pipelining/schedules.h"
#include "pipelining/simulator.h"

namespace tessel::pipelining {
namespace {

using ::tessel::testing::ExpectErrorContains;
constexpr ErrorCode kBad = ErrorCode::kInvalidArgument;

Program P(std::initializer_list<const char*> rows) {
  Program p;
  for (const char* r : rows) p.push_back(ParseRankProgram(r));
  return p;
}

TEST(VerifierTest, ComputeProgramYieldsItsStageToRankMap) {
  EXPECT_EQ(VerifyComputeProgram(P({"0F0,0F1,,3F0,3B0,3F1,3B1,0B0,0B1", ",1F0,2F0,1F1,2F1,2B0,1B0,2B1,1B1"}), 4, 2),
            (std::vector<int>{0, 1, 1, 0}));
}

TEST(VerifierTest, BackwardBeforeForwardIsRejected) {
  ExpectErrorContains([] { VerifyComputeProgram(P({"0B0,0F0"}), 1, 1); }, kBad,
                      {"pipeline program: rank 0, step 0: action 0B0 runs before its forward 0F0", "<-- ERROR HERE"});
}

TEST(VerifierTest, WeightBeforeInputIsRejected) {
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0W0,0I0"}), 1, 1); }, kBad,
                      "rank 0, step 1: action 0W0 runs before its backward-input 0I0");
}

TEST(VerifierTest, SecondBackwardIsRejected) {
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0I0,0B0"}), 1, 1); }, kBad,
                      "rank 0, step 2: action 0B0 is a second backward of microbatch 0 on stage 0");
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0F0"}), 1, 1); }, kBad,
                      "rank 0, step 1: action 0F0 runs twice");
}

TEST(VerifierTest, StageOnTwoRanksIsRejectedAtTheFirstConflict) {
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0B0", ",0F1,0B1"}), 1, 2); }, kBad,
                      "rank 1, step 1: action 0F1 puts stage 0 on a second rank (it runs on rank 0)");
}

TEST(VerifierTest, WrongMicrobatchCountsAreRejected) {
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0B0"}), 1, 2); }, kBad,
                      "stage 0 (rank 0) has 1 forwards, expected one per microbatch (2)");
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0F1,0B0,0I1"}), 1, 2); }, kBad,
                      "stage 0 (rank 0) has 1 backward-input (I) but 0 backward-weight (W) actions");
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0F1,0B0"}), 1, 2); }, kBad,
                      "stage 0 (rank 0) has 1 backwards (B=1, I=0), expected one per microbatch (2)");
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0F5"}), 1, 2); }, kBad,
                      "rank 0, step 1: action 0F5 names microbatch 5 outside [0, 2)");
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0B0"}), 2, 1); }, kBad, "stage 1 has no actions (2 stages");
}

TEST(VerifierTest, CommActionsAreNotComputeOnly) {
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0SEND_F0"}), 2, 1); }, kBad,
                      "rank 0, step 1: action 0SEND_F0 is not a compute action");
}

TEST(VerifierTest, CrossedMicrobatchOrderIsAWaitCycle) {
  // Rank 0 needs 1B0 before it forwards microbatch 1; rank 1 forwards microbatch 1 before microbatch 0.
  ExpectErrorContains([] { VerifyComputeProgram(P({"0F0,0B0,0F1,0B1", "1F1,1B1,1F0,1B0"}), 2, 2); }, kBad,
                      {"rank 0, step 1: action 0B0 waits for 1B0 or 1I0", "a cycle of waits"});
}

// PyTorch's lowered 2-rank, 2-stage program (lowering_test.cc) and variations that break one rule each.
const char* kRank0 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1";
const char* kRank1 = "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1";
const std::vector<int> kTwoStages = {0, 1};

TEST(VerifierTest, LoweredProgramFromPyTorchPasses) { VerifyLoweredProgram(P({kRank0, kRank1}), kTwoStages, 2); }

// Every SEND and RECV matched, and no cycle among single actions: but the executor posts each run of comm
// actions as one batch and runs a rank's batches in order, so rank 0's early RECV_B0 batch waits for rank 1's
// B0, which needs SEND_F0, queued behind that same RECV: the executor timed out after 300 s where the
// verifier passed it.
TEST(VerifierTest, ARecvBatchQueuedBeforeTheSendItWaitsOnIsRejected) {
  ExpectErrorContains([] { VerifyLoweredProgram(P({"0F0,0RECV_B0,0F1,0SEND_F0,0SEND_F1,0B0,0RECV_B1,0B1",
                                                   "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1"}),
                                                kTwoStages, 2); },
                      kBad, {"comm batch [0RECV_B0] waits for 1SEND_B0", "executor runs a rank's comm batches in order"});
}

TEST(VerifierTest, ComputeBeforeItsRecvIsRejected) {
  ExpectErrorContains([] { VerifyLoweredProgram(P({kRank0, "1F0,1RECV_F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1"}),
                                                kTwoStages, 2); },
                      kBad, "rank 1, step 0: action 1F0 runs before its 1RECV_F0 on this rank");
}

TEST(VerifierTest, SendWithoutRecvIsRejected) {
  ExpectErrorContains([] { VerifyLoweredProgram(P({kRank0, "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1"}),
                                                kTwoStages, 2); },
                      kBad, "rank 0, step 6: action 0RECV_B1 has no matching SEND_B 1SEND_B1 on rank 1");
  ExpectErrorContains([] { VerifyLoweredProgram(P({"0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0B1", kRank1}),
                                                kTwoStages, 2); },
                      kBad, "rank 0, step 6: action 0B1 runs before its 0RECV_B1 on this rank");
  ExpectErrorContains([] { VerifyLoweredProgram(P({"0F0,0SEND_F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1", kRank1}),
                                                kTwoStages, 2); },
                      kBad, "rank 1, step 1: action 1RECV_F1 has no matching SEND_F 0SEND_F1 on rank 0");
}

TEST(VerifierTest, SendBeforeItsComputeIsRejected) {
  ExpectErrorContains([] { VerifyLoweredProgram(P({"0SEND_F0,0F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1", kRank1}),
                                                kTwoStages, 2); },
                      kBad, "rank 0, step 0: action 0SEND_F0 sends before its forward 0F0");
}

TEST(VerifierTest, StageOnTheWrongRankAndCommInsideOneRankAreRejected) {
  ExpectErrorContains([] { VerifyLoweredProgram(P({kRank0, kRank1}), std::vector<int>{0, 0}, 2); }, kBad,
                      "rank 1, step 0: action 1RECV_F0 runs stage 1 on rank 1 but stage_to_rank puts it on rank 0");
  ExpectErrorContains([] { VerifyLoweredProgram(P({"0F0,0SEND_F0,1RECV_F0,1F0,1B0,0B0"}), std::vector<int>{0, 0}, 1); },
                      kBad, "rank 0, step 1: action 0SEND_F0 talks to stage 1, which runs on the same rank");
  ExpectErrorContains([] { VerifyLoweredProgram(P({kRank1, kRank0}), kTwoStages, 2); }, kBad,
                      "rank 0, step 0: action 1RECV_F0 runs stage 1 on rank 0 but stage_to_rank puts it on rank 1");
}

TEST(VerifierTest, CycleOfWaitsAcrossRanksIsRejected) {
  // Rank 1 forwards microbatch 1 first; rank 0 only sends it after microbatch 0's backward, which rank 1 sends
  // after its forward of microbatch 0, which comes after microbatch 1.
  ExpectErrorContains(
      [] {
        VerifyLoweredProgram(P({"0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1",
                                "1RECV_F1,1RECV_F0,1F1,1B1,1SEND_B1,1F0,1B0,1SEND_B0"}),
                             kTwoStages, 2);
      },
      kBad, {"rank 0, step 3: action 0B0 waits for 1SEND_B0", "a cycle of waits"});
}

TEST(VerifierTest, FsdpStateViolationsAreRejected) {
  const std::vector<int> one = {0};
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0UNSHARD,0F0,0RESHARD,0B0"}), one, 1); }, kBad,
                      "rank 0, step 3: action 0B0 computes on stage 0 while its parameters are resharded");
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0UNSHARD,0UNSHARD,0F0,0B0,0RESHARD"}), one, 1); }, kBad,
                      "rank 0, step 1: action 0UNSHARD unshards stage 0 twice without a RESHARD between");
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0F0,0RESHARD,0B0"}), one, 1); }, kBad,
                      "rank 0, step 1: action 0RESHARD reshards stage 0, which is not unsharded");
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0UNSHARD,0F0,0B0"}), one, 1); }, kBad,
                      "stage 0 (rank 0) is still unsharded at the end of its program");
  VerifyLoweredProgram(P({"0UNSHARD,0F0,0B0,0RESHARD"}), one, 1);
}

TEST(VerifierTest, EarlyOrRepeatedReduceGradIsRejected) {
  const std::vector<int> one = {0};
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0F0,0F1,0B0,0REDUCE_GRAD,0B1"}), one, 2); }, kBad,
                      "rank 0, step 3: action 0REDUCE_GRAD runs before the stage's last backward (1 of 2 weight");
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0F0,0I0,0REDUCE_GRAD,0W0"}), one, 1); }, kBad,
                      "(0 of 1 weight gradients done)");
  ExpectErrorContains([&] { VerifyLoweredProgram(P({"0F0,0B0,0REDUCE_GRAD,0REDUCE_GRAD"}), one, 1); }, kBad,
                      "rank 0, step 3: action 0REDUCE_GRAD reduces stage 0's gradients twice");
}

TEST(VerifierTest, BadStageMapIsRejected) {
  ExpectErrorContains([] { VerifyLoweredProgram(P({kRank0, kRank1}), std::vector<int>{0, 2}, 2); }, kBad,
                      "stage_to_rank puts stage 1 on rank 2 but the program has 2 ranks");
}

// Swapping two neighbouring actions of a valid lowered program either keeps it runnable or breaks it; the
// verifier must never accept a program the independent event simulation cannot finish, and must accept the
// unmodified ones. Seeded, so a failure reproduces.
TEST(VerifierTest, RandomNeighbourSwapsAreAcceptedOnlyWhenTheSimulationFinishes) {
  std::mt19937 rng(20261201);
  int accepted = 0, rejected = 0;
  for (ScheduleKind k : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZBVZeroBubble}) {
    const int v = k == ScheduleKind::k1F1B ? 1 : 2, p = 3, m = 4;
    const std::vector<int> where = StageToRankMap(k, p, p * v);
    const Program lowered = LowerProgram(GenerateSchedule(k, p, p * v, m), where, m, {.fsdp = true});
    VerifyLoweredProgram(lowered, where, m);
    for (int trial = 0; trial < 150; ++trial) {
      Program mutated = lowered;
      RankProgram& r = mutated[rng() % p];
      const size_t i = rng() % (r.size() - 1);
      std::swap(r[i], r[i + 1]);
      bool ok = true;
      try {
        VerifyLoweredProgram(mutated, where, m);
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), kBad) << e.what();
        ok = false;
      }
      if (ok) {
        ++accepted;
        EXPECT_NO_THROW(Simulate(mutated, where)) << ScheduleName(k) << "\n" << FormatProgram(mutated);
      } else {
        ++rejected;
      }
    }
  }
  EXPECT_GT(accepted, 0);  // some swaps are harmless (two independent sends, ...)
  EXPECT_GT(rejected, 0);  // and some break the program
}

}  // namespace
}  // namespace tessel::pipelining
