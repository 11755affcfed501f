// FindDeadlock finds exactly the cycles of blocked threads that wait for calls never issued.
#include "comm/wait_graph.h"

#include <gtest/gtest.h>

namespace tessel::comm {
namespace {

BlockedCall Blocked(int rank, uint64_t thread, const std::string& key, int64_t seq, std::vector<int> members) {
  return {.rank = rank, .thread = thread, .key = key, .seq = seq, .call = "all_reduce #" + std::to_string(seq),
          .label = "group '" + key + "'", .members = std::move(members)};
}

TEST(WaitGraphTest, TwoRanksBlockedOnDifferentGroupsAreADeadlockNamedFromTheLowestRank) {
  const std::vector<BlockedCall> blocked = {Blocked(1, 11, "world", 3, {0, 1}), Blocked(0, 10, "sub", 0, {0, 1})};
  const IssueMap issued = {{{0, "sub"}, {10, 1}}, {{1, "sub"}, {11, 0}}, {{0, "world"}, {10, 3}},
                           {{1, "world"}, {11, 4}}};
  for (const auto& [rank, thread] : {std::pair{0, uint64_t{10}}, std::pair{1, uint64_t{11}}}) {
    const std::optional<Deadlock> d = FindDeadlock(blocked, issued, rank, thread);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->message.substr(0, 177),
              "deadlock: rank 0 waits in all_reduce #0 on group 'sub' for rank 1, which has not issued it; rank 1 "
              "waits in all_reduce #3 on group 'world' for rank 0, which has not issued it. E");
    EXPECT_EQ(d->calls, (std::vector<std::pair<std::string, int64_t>>{{"sub", 0}, {"world", 3}}));
  }
}

TEST(WaitGraphTest, NoCycleWhenThePeerIssuedTheCallOrIsNotBlockedOrIssuesFromAnotherThread) {
  const std::vector<BlockedCall> blocked = {Blocked(0, 10, "sub", 0, {0, 1}), Blocked(1, 11, "world", 3, {0, 1})};
  // Rank 1 already issued sub #0 (asynchronously, before blocking on the world): it will arrive.
  EXPECT_FALSE(FindDeadlock(blocked, {{{1, "sub"}, {11, 1}}, {{0, "world"}, {10, 3}}}, 0, 10));
  // Rank 1 issues on "sub" from thread 12, which is not blocked: it may still issue.
  EXPECT_FALSE(FindDeadlock(blocked, {{{1, "sub"}, {12, 0}}, {{0, "world"}, {10, 3}}}, 0, 10));
  // Only rank 0 is blocked.
  EXPECT_FALSE(FindDeadlock(std::vector<BlockedCall>{blocked[0]}, {{{1, "sub"}, {11, 0}}}, 0, 10));
}

TEST(WaitGraphTest, ThreeRankCycleThroughThreeGroupsIsFound) {
  const std::vector<BlockedCall> blocked = {Blocked(0, 10, "a", 0, {0, 1}), Blocked(1, 11, "b", 0, {1, 2}),
                                            Blocked(2, 12, "c", 0, {2, 0})};
  const IssueMap issued = {{{0, "a"}, {10, 1}}, {{1, "a"}, {11, 0}}, {{1, "b"}, {11, 1}}, {{2, "b"}, {12, 0}},
                           {{2, "c"}, {12, 1}}, {{0, "c"}, {10, 0}}};
  const std::optional<Deadlock> d = FindDeadlock(blocked, issued, 2, 12);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->calls.size(), 3u);
  EXPECT_EQ(d->calls.front(), (std::pair<std::string, int64_t>{"a", 0}));
  EXPECT_NE(d->message.find("rank 2 waits in all_reduce #0 on group 'c' for rank 0"), std::string::npos);
}

}  // namespace
}  // namespace tessel::comm
