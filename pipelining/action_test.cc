// pipelining/action_test.cc — the action IR's text form: PyTorch's spellings parse and print back exactly,
// malformed text is rejected with the text and the reason.
#include "pipelining/action.h"

#include <gtest/gtest.h>

#include <set>
#include <unordered_set>

#include "core/base/testing/expect_error.h"

namespace tessel::pipelining {
namespace {

using ::tessel::testing::ExpectErrorContains;

TEST(ActionTest, ParsesPyTorchCompactForms) {
  EXPECT_EQ(ParseAction("1F0"), (Action{1, ActionKind::kForward, 0}));
  EXPECT_EQ(ParseAction("0W3"), (Action{0, ActionKind::kBackwardWeight, 3}));
  EXPECT_EQ(ParseAction("2SEND_B2"), (Action{2, ActionKind::kSendB, 2}));
  EXPECT_EQ(ParseAction("1UNSHARD"), (Action{1, ActionKind::kUnshard, std::nullopt}));
  EXPECT_EQ(ParseAction("0REDUCE_GRAD"), (Action{0, ActionKind::kReduceGrad, std::nullopt}));
  EXPECT_EQ(ParseAction(" 12B34 "), (Action{12, ActionKind::kFullBackward, 34}));
  EXPECT_EQ(ParseAction("3RECV_F10"), (Action{3, ActionKind::kRecvF, 10}));
}

TEST(ActionTest, EveryKindPrintsAndParsesBackExactly) {
  const std::vector<std::string> texts = {"1F0",     "0B1",       "3I2",      "0W3",       "2SEND_F0",   "1RECV_F7",
                                          "2SEND_B2", "4RECV_B11", "1UNSHARD", "10RESHARD", "0REDUCE_GRAD"};
  std::set<ActionKind> kinds;
  for (const std::string& t : texts) {
    SCOPED_TRACE(t);
    const Action a = ParseAction(t);
    kinds.insert(a.kind);
    EXPECT_EQ(ToString(a), t);
    EXPECT_EQ(ParseAction(ToString(a)), a);
    EXPECT_EQ(ParseActionKind(ActionKindName(a.kind)), a.kind);
  }
  EXPECT_EQ(kinds.size(), 11u);
}

TEST(ActionTest, BuildersMatchTheTextForm) {
  EXPECT_EQ(ToString(F(1, 0)), "1F0");
  EXPECT_EQ(ToString(B(2, 5)), "2B5");
  EXPECT_EQ(ToString(I(0, 1)), "0I1");
  EXPECT_EQ(ToString(W(3, 4)), "3W4");
}

TEST(ActionTest, KindClassesArePyTorchs) {
  for (ActionKind k : {ActionKind::kForward, ActionKind::kFullBackward, ActionKind::kBackwardInput,
                       ActionKind::kBackwardWeight}) {
    EXPECT_TRUE(IsCompute(k));
    EXPECT_FALSE(IsComm(k));
    EXPECT_TRUE(HasMicrobatch(k));
  }
  for (ActionKind k : {ActionKind::kSendF, ActionKind::kRecvF, ActionKind::kSendB, ActionKind::kRecvB}) {
    EXPECT_FALSE(IsCompute(k));
    EXPECT_TRUE(IsComm(k));
    EXPECT_TRUE(HasMicrobatch(k));
  }
  for (ActionKind k : {ActionKind::kUnshard, ActionKind::kReshard, ActionKind::kReduceGrad}) {
    EXPECT_FALSE(IsCompute(k));
    EXPECT_FALSE(IsComm(k));
    EXPECT_FALSE(HasMicrobatch(k));
  }
}

TEST(ActionTest, MalformedTextIsRejectedWithTheTextAndReason) {
  ExpectErrorContains([] { ParseAction("F0"); }, ErrorCode::kInvalidArgument, {"'F0'", "no stage index"});
  ExpectErrorContains([] { ParseAction("1X0"); }, ErrorCode::kInvalidArgument, {"'1X0'", "unknown kind 'X'"});
  ExpectErrorContains([] { ParseAction("1F"); }, ErrorCode::kInvalidArgument, "F needs a microbatch index");
  ExpectErrorContains([] { ParseAction("1SEND_B"); }, ErrorCode::kInvalidArgument, "SEND_B needs a microbatch");
  ExpectErrorContains([] { ParseAction("1UNSHARD0"); }, ErrorCode::kInvalidArgument,
                      "UNSHARD takes no microbatch index");
  ExpectErrorContains([] { ParseAction("01F0"); }, ErrorCode::kInvalidArgument, "stage index is not a canonical");
  ExpectErrorContains([] { ParseAction("1F00"); }, ErrorCode::kInvalidArgument, "microbatch index is not a canonical");
  ExpectErrorContains([] { ParseAction(""); }, ErrorCode::kInvalidArgument, "no stage index");
  ExpectErrorContains([] { ParseAction("1f0"); }, ErrorCode::kInvalidArgument, "unknown kind 'f'");
}

TEST(ActionTest, RankProgramRoundTripsWithIdleSlots) {
  const RankProgram r = ParseRankProgram("0F0,0F1,,0B0,0B1");
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0], F(0, 0));
  EXPECT_FALSE(r[2].has_value());
  EXPECT_EQ(r[4], B(0, 1));
  EXPECT_EQ(ToString(r), "0F0,0F1,,0B0,0B1");
  EXPECT_EQ(ToString(WithoutIdle(r)), "0F0,0F1,0B0,0B1");
  EXPECT_EQ(ToString(ParseRankProgram(",1F0,")), ",1F0,");
  EXPECT_TRUE(ParseRankProgram("").empty());
}

TEST(ActionTest, CountActionsCountsOnlyMatchingNonIdleSlots) {
  const Program p = {ParseRankProgram("0F0,,0F1,0B0"), ParseRankProgram(",1F0,1B0")};
  EXPECT_EQ(CountActions(p, [](const Action& a) { return a.kind == ActionKind::kForward; }), 3);
  EXPECT_EQ(CountActions(p, [](const Action& a) { return a.stage == 1; }), 2);
}

TEST(ActionTest, EqualActionsHashEqualAndOrderIsStrict) {
  std::unordered_set<Action, ActionHash> set = {F(0, 0), F(0, 1), B(0, 0), ParseAction("0UNSHARD")};
  EXPECT_EQ(set.size(), 4u);
  EXPECT_TRUE(set.count(ParseAction("0F1")));
  EXPECT_FALSE(set.count(F(1, 0)));
  EXPECT_TRUE(F(0, 0) < F(0, 1));
  EXPECT_FALSE(F(0, 1) < F(0, 0));
  EXPECT_TRUE(F(0, 5) < F(1, 0));
}

TEST(ActionTest, FormatProgramMarksTheErrorStep) {
  const Program p = {ParseRankProgram("0F0,0F1"), ParseRankProgram(",1F0")};
  const std::string grid = FormatProgram(p, 1);
  EXPECT_NE(grid.find("Rank 0"), std::string::npos) << grid;
  EXPECT_NE(grid.find("Step 0: 0F0"), std::string::npos) << grid;
  EXPECT_NE(grid.find("Step 1: 0F1    1F0    <-- ERROR HERE"), std::string::npos) << grid;
  EXPECT_EQ(FormatProgram(p).find("ERROR"), std::string::npos);
}

}  // namespace
}  // namespace tessel::pipelining
