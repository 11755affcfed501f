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

// A p2p thread blocked on the op with index `seq` of `channel`, waiting for `peer`.
BlockedCall BlockedP2P(int rank, uint64_t thread, const std::string& channel, int64_t seq, int peer,
                       const std::string& op) {
  return {.rank = rank, .thread = thread, .key = channel, .seq = seq, .call = op, .label = "group 'pp'",
          .members = {peer}, .issuer_key = P2PIssuerKey("pp")};
}

TEST(WaitGraphTest, P2PThreadsWaitingForPostsTheOtherNeverMakesAreADeadlockAndStaleOrMadePostsAreNot) {
  // Rank 0 waits for its 2nd receive from rank 1 on tag 7 (rank 1 sent one); rank 1 waits for its 1st
  // receive from rank 0 on tag 3 (rank 0 sent none).
  const std::string one_to_zero = P2PChannelKey("pp", 1, 0, 7), zero_to_one = P2PChannelKey("pp", 0, 1, 3);
  EXPECT_EQ(one_to_zero, "pp/p2p/1>0/7");
  const std::vector<BlockedCall> blocked = {BlockedP2P(0, 10, one_to_zero, 1, 1, "recv from rank 1 (tag 7)"),
                                            BlockedP2P(1, 11, zero_to_one, 0, 0, "recv from rank 0 (tag 3)")};
  IssueMap issued = {{{0, "pp/p2p"}, {10, 0}}, {{1, "pp/p2p"}, {11, 0}}, {{1, one_to_zero}, {11, 1}},
                     {{0, one_to_zero}, {10, 2}}, {{1, zero_to_one}, {11, 1}}};
  const std::optional<Deadlock> d = FindDeadlock(blocked, issued, 1, 11);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->calls, (std::vector<std::pair<std::string, int64_t>>{{one_to_zero, 1}, {zero_to_one, 0}}));
  EXPECT_EQ(d->message.substr(0, 204),
            "deadlock: rank 0 waits in recv from rank 1 (tag 7) on group 'pp' for rank 1, which has not posted its "
            "side; rank 1 waits in recv from rank 0 (tag 3) on group 'pp' for rank 0, which has not posted its side");
  EXPECT_NE(d->message.find("a rank left a step of sends and receives midway"), std::string::npos);
  EXPECT_EQ(d->message.find("collectives on different groups"), std::string::npos) << "no collective in the cycle";
  // Rank 0 has posted (counted) its send on tag 3: rank 1's receive will be matched.
  issued[{0, zero_to_one}] = {10, 1};
  EXPECT_FALSE(FindDeadlock(blocked, issued, 1, 11));
  EXPECT_FALSE(FindDeadlock(blocked, issued, 0, 10));
  // Neither rank's p2p thread recorded (it never posted on the group): no edge to follow.
  EXPECT_FALSE(FindDeadlock(blocked, {{{1, one_to_zero}, {11, 1}}}, 0, 10));
}

TEST(WaitGraphTest, ABatchIsStuckWhenAnyOfItsOpsIs) {
  // Rank 0's p2p thread waits on a batch: its receive on tag 2 was sent already (no edge); its 5th send on
  // tag 1 waits for a receive rank 1 has not posted (4 posted). Rank 1's p2p thread waits on tag 9, where
  // rank 0 never posted: the edge goes to rank 0's p2p thread through the issuer key.
  const std::string to_one = P2PChannelKey("pp", 0, 1, 1), to_zero = P2PChannelKey("pp", 1, 0, 2);
  const std::string tag9 = P2PChannelKey("pp", 0, 1, 9);
  std::vector<BlockedCall> blocked = {BlockedP2P(0, 10, to_zero, 0, 1, "recv from rank 1 (tag 2)"),
                                      BlockedP2P(0, 10, to_one, 4, 1, "send to rank 1 (tag 1)"),
                                      BlockedP2P(1, 11, tag9, 0, 0, "recv from rank 0 (tag 9)")};
  const IssueMap issued = {{{0, "pp/p2p"}, {10, 0}}, {{1, "pp/p2p"}, {11, 0}}, {{1, to_zero}, {11, 1}},
                           {{1, to_one}, {11, 4}}, {{0, to_one}, {10, 5}}};
  const std::optional<Deadlock> d = FindDeadlock(blocked, issued, 0, 10);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->calls, (std::vector<std::pair<std::string, int64_t>>{{to_one, 4}, {tag9, 0}}));
  // Without the send (its receive posted), the batch waits only on a receive whose send was made.
  blocked.erase(blocked.begin() + 1);
  EXPECT_FALSE(FindDeadlock(blocked, issued, 0, 10));
  EXPECT_FALSE(FindDeadlock(blocked, issued, 1, 11));
}

TEST(WaitGraphTest, ACycleThroughACollectiveAndAReceiveNamesBothCauses) {
  // Rank 0's thread 20 waits in all_reduce #0 on "world", which rank 1 has not issued; rank 1's thread 21
  // (which issues on "world") waits for a send rank 0's thread 20 would post on "pp".
  const std::string channel = P2PChannelKey("pp", 0, 1, 5);
  const std::vector<BlockedCall> blocked = {Blocked(0, 20, "world", 0, {0, 1}),
                                            BlockedP2P(1, 21, channel, 0, 0, "recv from rank 0 (tag 5)")};
  const IssueMap issued = {{{0, "world"}, {20, 1}}, {{1, "world"}, {21, 0}}, {{0, "pp/p2p"}, {20, 0}}};
  const std::optional<Deadlock> d = FindDeadlock(blocked, issued, 1, 21);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->message.find("rank 0 waits in all_reduce #0 on group 'world' for rank 1, which has not issued it; "
                            "rank 1 waits in recv from rank 0 (tag 5) on group 'pp' for rank 0, which has not posted "
                            "its side"),
            std::string::npos)
      << d->message;
  EXPECT_NE(d->message.find("none can ever issue what the other needs: a send or receive waits for a rank that is "
                            "inside a collective"),
            std::string::npos)
      << d->message;
}

TEST(WaitGraphTest, ASendWhosePeerSitsInACollectiveOfTheGroupIsACycleThroughTheCallersWait) {
  // Rank 0's thread 20 waits for its own send (P2PCallerWait); its p2p queue waits for rank 1, which never posted
  // on the group and whose thread 21 (issuing on "world") waits in barrier #0 for rank 0's thread 20.
  const std::string issuer = P2PIssuerKey("world"), channel = P2PChannelKey("world", 0, 1, 0);
  const uint64_t queue = P2PPosterId(issuer);
  IssueMap issued = {{{0, "world"}, {20, 0}}, {{1, "world"}, {21, 1}}};
  BlockedCall caller = P2PCallerWait(0, issuer, "group 'world'", NoteBatch(issued, 0, issuer, BatchEvent::kSubmitted));
  caller.thread = 20;
  NoteBatch(issued, 0, issuer, BatchEvent::kStarted);
  const BlockedCall send{.rank = 0, .thread = queue, .key = channel, .seq = 0, .call = "send to rank 1 (tag 0)",
                         .label = "group 'world'", .members = {1}, .issuer_key = issuer};
  const std::vector<BlockedCall> blocked = {caller, send, Blocked(1, 21, "world", 0, {0, 1})};
  CountPost(issued, 0, channel, issuer);
  for (const auto& [rank, thread] : std::vector<std::pair<int, uint64_t>>{{0, 20}, {0, queue}, {1, 21}}) {
    const std::optional<Deadlock> d = FindDeadlock(blocked, issued, rank, thread);
    ASSERT_TRUE(d.has_value()) << rank << " " << thread;
    EXPECT_NE(d->message.find("rank 0 waits in send to rank 1 (tag 0) on group 'world' for rank 1, which has not "
                              "posted its side; rank 1 waits in all_reduce #0 on group 'world' for rank 0, which has "
                              "not issued it. "),
              std::string::npos)
        << d->message;
    EXPECT_EQ(d->calls.size(), 2u);  // the send and the barrier (the caller's wait rethrows the send's verdict)
  }
  // Not a deadlock: rank 1 has a batch queued (its queue may still post the receive), or rank 0's thread is not
  // waiting for its send (it computes, and will reach the barrier).
  IssueMap queued = issued;
  NoteBatch(queued, 1, issuer, BatchEvent::kSubmitted);
  EXPECT_FALSE(FindDeadlock(blocked, queued, 1, 21).has_value());
  const std::vector<BlockedCall> no_caller(blocked.begin() + 1, blocked.end());
  EXPECT_FALSE(FindDeadlock(no_caller, issued, 1, 21).has_value());
  // Nor when the caller's batch already finished and its queue went on to the next batch (the send here) before
  // the caller woke: the caller does not wait for that one (it will issue the all_reduce rank 1 waits in).
  IssueMap next = issued;
  NoteBatch(next, 0, issuer, BatchEvent::kFinished);
  EXPECT_FALSE(FindDeadlock(blocked, next, 1, 21).has_value());
  // A peer that handed batches to its queue waits, through it, for the thread that handed them over (its feeder),
  // not for the thread issuing its collectives.
  IssueMap fed = issued;
  NoteBatch(fed, 1, issuer, BatchEvent::kSubmitted);  // (this test's thread is the feeder)
  NoteBatch(fed, 1, issuer, BatchEvent::kStarted);
  NoteBatch(fed, 1, issuer, BatchEvent::kFinished);
  EXPECT_FALSE(FindDeadlock(blocked, fed, 1, 21).has_value());
}

}  // namespace
}  // namespace tessel::comm
