// The threads backend never hangs: mismatched calls, missing peers and failing ranks raise clear
// errors within seconds; plus sub-groups, point-to-point and argument validation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "core/base/testing/expect_error.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Runs `fn`, expecting a tessel::Error with `code` whose message contains every fragment.
using ::tessel::testing::ExpectErrorContains;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

TEST(ThreadsErrorsTest, MismatchedCollectivesRaiseTheSameErrorNamingBothCallsOnEveryRank) {
  std::vector<std::string> messages(2);
  RunRanks(2, [&](ProcessGroupPtr pg) {
    try {
      if (pg->rank() == 0) {
        pg->ReduceScatter(Zeros({1024}), Zeros({2048}), ReduceOp::kSum)->Wait();
      } else {
        pg->AllGather(Zeros({2048}), Zeros({1024}))->Wait();
      }
      ADD_FAILURE() << "mismatch not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted);
      messages[pg->rank()] = e.what();
    }
    // The group stays usable: both ranks consumed sequence number 0.
    Tensor t = Ones({3});
    pg->AllReduce(t, ReduceOp::kSum)->Wait();
    EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(3, 2)));
  });
  EXPECT_EQ(messages[0], messages[1]);
  EXPECT_NE(messages[0].find("rank 1 called all_gather #0 (4096 B) while rank 0 called reduce_scatter #0 (8192 B)"),
            std::string::npos)
      << messages[0];
}

TEST(ThreadsErrorsTest, SameBytesOfDifferentShapesAreAMismatch) {
  // [2, 3] against [3, 2]: the same 24 bytes, which a byte count alone let through (torch's gloo too)
  RunRanks(2, [](ProcessGroupPtr pg) {
    ExpectErrorContains([&] { pg->AllReduce(Zeros(pg->rank() == 0 ? Shape{2, 3} : Shape{3, 2}), ReduceOp::kSum)
                                  ->Wait(); },
                        ErrorCode::kAborted,
                        {"rank 1 called all_reduce #0 (24 B of shape [3, 2], float32, sum) while rank 0 called "
                         "all_reduce #0 (24 B of shape [2, 3], float32, sum)"});
    Tensor same = Ones({2, 3});  // equal shapes still pass
    pg->AllReduce(same, ReduceOp::kSum)->Wait();
    EXPECT_EQ(same.ToVector<double>(), (std::vector<double>(6, 2)));
  });
}

TEST(ThreadsErrorsTest, DTypeAndRootMismatchesAreNamed) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    const DType dtype = pg->rank() == 0 ? DType::kFloat32 : DType::kInt32;
    ExpectErrorContains([&] { pg->AllReduce(Zeros({4}, dtype), ReduceOp::kSum)->Wait(); }, ErrorCode::kAborted,
                {"rank 1 called all_reduce #0 (16 B, int32, sum) while rank 0 called all_reduce #0 (16 B, float32, sum)"});
    ExpectErrorContains([&] { pg->Broadcast(Zeros({4}), pg->rank())->Wait(); }, ErrorCode::kAborted,
                {"root 1", "root 0", "broadcast #1"});
  });
}

TEST(ThreadsErrorsTest, MissingPeerRaisesDeadlineExceededNamingItWithinSeconds) {
  RunRanksOptions options;
  options.timeout = milliseconds(500);
  const auto start = Clock::now();
  std::atomic<int> done{0};
  RunRanks(
      3,
      [&](ProcessGroupPtr pg) {
        if (pg->rank() == 1) {  // skips the collective but stays alive (a rank that returned fails peers at once)
          while (done.load() < 2) std::this_thread::sleep_for(milliseconds(5));
          return;
        }
        ExpectErrorContains([&] { pg->AllReduce(Zeros({4}), ReduceOp::kSum)->Wait(); }, ErrorCode::kDeadlineExceeded,
                    {"all_reduce #0", "timed out after 500 ms", "rank(s) 1 (global 1) never arrived"});
        // The group is unusable afterwards (its sequence numbers no longer line up): fail at once.
        ExpectErrorContains([&] { pg->Barrier()->Wait(); }, ErrorCode::kAborted, {"unusable", "timed out"});
        ++done;
      },
      options);
  EXPECT_LT(Seconds(start), 5.0);
}

// The default timeout (300 s) stays in force: only the detection of a returned rank can make these fast,
// and a regression shows up as kDeadlineExceeded after the timeout rather than as a flaky time bound.
TEST(ThreadsErrorsTest, PeerThatReturnedFromRunRanksFailsWaitersAtOnceNamingIt) {
  RunRanks(3, [](ProcessGroupPtr pg) {
    if (pg->rank() == 1) return;  // returns without the barrier
    // Rank 0 and 2 race: the one that fails and returns first is named too by the other ("rank(s)
    // 0 (global 0), 1 (global 1)" or "rank(s) 1 (global 1), 2 (global 2)"); rank 1 is named always.
    ExpectErrorContains([&] { pg->Barrier()->Wait(); }, ErrorCode::kAborted,
                        {"barrier #0", "1 (global 1)", "already returned from RunRanks"});
  });
  RunRanks(2, [](ProcessGroupPtr pg) {
    if (pg->rank() == 1) return;
    ExpectErrorContains([&] { pg->Recv(Zeros({2}), 1, 7)->Wait(); }, ErrorCode::kAborted,
                        {"recv from rank 1 (tag 7", "already returned from RunRanks"});
  });
}

// A rank that left its groups (destroy_process_group) but whose thread goes on: its peers' waits end at
// once naming it, although its thread has not returned (it waits here until they have failed: before
// SetThreadsRankDeparted they waited for that, i.e. out the timeout).
TEST(ThreadsErrorsTest, PeerThatDestroyedItsProcessGroupFailsWaitersAtOnceNamingIt) {
  std::atomic<int> failed{0};
  RunRanksOptions options;
  options.timeout = milliseconds(20000);
  RunRanks(
      3,
      [&](ProcessGroupPtr pg) {
        if (pg->rank() == 1) {
          SetThreadsRankDeparted(pg, true);
          while (failed.load() < 2) std::this_thread::sleep_for(milliseconds(1));
          return;
        }
        ExpectErrorContains(
            [&] { pg->Barrier()->Wait(); }, ErrorCode::kAborted,
            {"barrier #0", "rank(s) 1 (global 1) called destroy_process_group() and will never call it"});
        if (pg->rank() == 0) {
          ExpectErrorContains([&] { pg->Recv(Zeros({2}), 1, 7)->Wait(); }, ErrorCode::kAborted,
                              {"recv from rank 1 (tag 7", "rank 1 (global 1) called destroy_process_group()"});
        }
        ++failed;
      },
      options);
}

// Every rank leaves and joins again (a script in two phases, each init_process_group ... destroy_process_group),
// rank 1 slower: joining again is a rendezvous (ThreadsWorld::Rejoin), so rank 0's next collective does not find
// rank 1 still away (it failed "called destroy_process_group()" before the rendezvous); a rank that returns
// instead of joining fails the joiners at once, naming it.
TEST(ThreadsErrorsTest, RanksThatRejoinAfterDestroyingTheirProcessGroupMeetAgain) {
  RunRanks(2, [&](ProcessGroupPtr pg) {
    for (int phase = 0; phase < 2; ++phase) {
      Tensor t = Full({1}, static_cast<double>(pg->rank() + 1 + phase));
      pg->AllReduce(t, ReduceOp::kSum)->Wait();
      EXPECT_EQ(t.item<float>(), static_cast<float>(3 + 2 * phase));
      SetThreadsRankDeparted(pg, true);
      if (pg->rank() == 1) std::this_thread::sleep_for(milliseconds(200));
      SetThreadsRankDeparted(pg, false);
    }
  });
  RunRanks(2, [](ProcessGroupPtr pg) {
    SetThreadsRankDeparted(pg, true);
    if (pg->rank() == 1) return;
    ExpectErrorContains([&] { SetThreadsRankDeparted(pg, false); }, ErrorCode::kAborted,
                        {"init_process_group on rank 0", "rank(s) 1 returned from RunRanks"});
  });
}

TEST(ThreadsErrorsTest, GroupUsedAfterRunRanksFailsAtOnceNamingTheRanksThatLeft) {
  ProcessGroupPtr kept;
  RunRanks(2, [&](ProcessGroupPtr pg) {
    if (pg->rank() == 0) kept = pg;
  });
  ASSERT_NE(kept, nullptr);
  const auto start = Clock::now();
  ExpectErrorContains([&] { kept->AllReduce(Zeros({4}), ReduceOp::kSum)->Wait(); }, ErrorCode::kAborted,
                      {"all_reduce #0", "rank(s) 1 (global 1) already returned"});
  EXPECT_LT(Seconds(start), 60.0);  // generous: the failure mode is the 300 s timeout
}

TEST(ThreadsErrorsTest, RankThatThrowsMakesPeersFailFastAndRunRanksRethrowsTheOriginal) {
  const auto start = Clock::now();
  std::vector<std::string> peer_errors(3);
  ExpectErrorContains(
      [&] {
        RunRanks(3, [&](ProcessGroupPtr pg) {
          if (pg->rank() == 2) {
            std::this_thread::sleep_for(milliseconds(50));
            TESSEL_CHECK(false, "boom from user code");
          }
          try {
            pg->AllReduce(Zeros({4}), ReduceOp::kSum)->Wait();
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kAborted);
            peer_errors[pg->rank()] = e.what();
          }
        });
      },
      ErrorCode::kInvalidArgument, {"boom from user code"});
  EXPECT_LT(Seconds(start), 5.0);  // the default timeout is 300 s
  for (int r : {0, 1}) {
    EXPECT_NE(peer_errors[r].find("rank 2 failed: "), std::string::npos) << peer_errors[r];
    EXPECT_NE(peer_errors[r].find("boom from user code"), std::string::npos) << peer_errors[r];
  }
}

TEST(ThreadsErrorsTest, ExceptionEscapingWithPendingSubgroupWorkStillFailsFast) {
  const auto start = Clock::now();
  ExpectErrorContains(
      [&] {
        RunRanks(2, [&](ProcessGroupPtr pg) {
          ProcessGroupPtr sub = pg->NewGroup({0, 1});
          if (pg->rank() == 0) {
            sub->AllReduce(Zeros({4}), ReduceOp::kSum);  // in flight, never matched
            throw Error(ErrorCode::kFailedPrecondition, "rank 0 gives up");
          }
          std::this_thread::sleep_for(milliseconds(20));
        });
      },
      ErrorCode::kFailedPrecondition, {"rank 0 gives up"});
  EXPECT_LT(Seconds(start), 5.0);
}

TEST(ThreadsErrorsTest, SubgroupsReduceOverTheirMembersOnly) {
  RunRanks(4, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    ProcessGroupPtr even = pg->NewGroup({0, 2});
    ProcessGroupPtr odd = pg->NewGroup({3, 1});  // group rank 0 is global rank 3
    ProcessGroupPtr mine = r % 2 == 0 ? even : odd;
    EXPECT_EQ((r % 2 == 0 ? odd : even), nullptr);
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->size(), 2);
    if (r % 2 == 1) {
      EXPECT_EQ(mine->global_ranks(), (std::vector<int>{3, 1}));
      EXPECT_EQ(mine->rank(), r == 3 ? 0 : 1);
    }
    Tensor t = Full({2}, r + 1);
    mine->AllReduce(t, ReduceOp::kSum)->Wait();
    EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(2, r % 2 == 0 ? 1 + 3 : 2 + 4)));
    Tensor g = Zeros({2});
    mine->AllGather(g, Full({1}, r))->Wait();
    EXPECT_EQ(g.ToVector<double>(), r % 2 == 0 ? (std::vector<double>{0, 2}) : (std::vector<double>{3, 1}));
    // A sub-group of a sub-group: only member 1 belongs; the world group still works afterwards.
    ProcessGroupPtr single = mine->NewGroup({1});
    EXPECT_EQ(single != nullptr, mine->rank() == 1);
    if (single) {
      EXPECT_EQ(single->global_ranks(), (std::vector<int>{r}));
      Tensor s = Full({2}, 5);
      single->AllReduce(s, ReduceOp::kAvg)->Wait();
      EXPECT_EQ(s.ToVector<double>(), (std::vector<double>(2, 5)));
    }
    pg->Barrier()->Wait();
  });
}

// torch's use_local_synchronization: only the members create the group; rank 1 never takes part, and
// calling it there is an error naming the list. Two calls with the same list pair up by their order.
TEST(ThreadsErrorsTest, GroupsAmongMembersNeedOnlyTheirMembers) {
  RunRanks(3, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    if (r == 1) {
      ExpectErrorContains([&] { pg->NewGroupAmongMembers({0, 2}); }, ErrorCode::kInvalidArgument,
                          {"rank 1 of group 'world'", "is not in [0,2]; only members call it"});
    } else {
      ProcessGroupPtr first = pg->NewGroupAmongMembers({0, 2});
      ProcessGroupPtr second = pg->NewGroupAmongMembers({0, 2});
      EXPECT_EQ(first->name(), "world.local[0,2]#0");
      EXPECT_EQ(second->name(), "world.local[0,2]#1");
      EXPECT_EQ(first->global_ranks(), (std::vector<int>{0, 2}));
      Tensor t = Full({2}, r + 1);
      second->AllReduce(t, ReduceOp::kSum)->Wait();
      EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(2, 1 + 3)));
    }
    ProcessGroupPtr all = pg->NewGroup({2, 1, 0});  // the group's own sequence: still in step on every rank
    Tensor u = Full({1}, r);
    all->AllReduce(u, ReduceOp::kSum)->Wait();
    EXPECT_EQ(u.ToVector<double>(), (std::vector<double>{3}));
  });
}

TEST(ThreadsErrorsTest, BatchedSendRecvExchangesInBothDirectionsWithoutDeadlock) {
  RunRanks(4, [](ProcessGroupPtr pg) {
    const int r = pg->rank(), w = pg->size();
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    Tensor to_next = Full({3}, r), to_prev = Full({2}, 10 * r);
    Tensor from_prev = Zeros({3}), from_next = Zeros({2});
    // Posts in an order that would deadlock with blocking sends; tags tell the two streams apart.
    pg->BatchP2P({{P2POp::Kind::kSend, to_next, next, 1},
                  {P2POp::Kind::kSend, to_prev, prev, 2},
                  {P2POp::Kind::kRecv, from_next, next, 2},
                  {P2POp::Kind::kRecv, from_prev, prev, 1}})
        ->Wait();
    EXPECT_EQ(from_prev.ToVector<double>(), (std::vector<double>(3, prev)));
    EXPECT_EQ(from_next.ToVector<double>(), (std::vector<double>(2, 10 * next)));
  });
}

TEST(ThreadsErrorsTest, SendAndRecvMatchInPostingOrderPerTag) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    if (pg->rank() == 0) {
      pg->Send(Full({2}, 1), 1, 7);
      pg->Send(Full({2}, 2), 1, 7)->Wait();
    } else {
      Tensor a = Zeros({2}), b = Zeros({2});
      pg->Recv(a, 0, 7);
      pg->Recv(b, 0, 7)->Wait();
      EXPECT_EQ(a.ToVector<double>(), (std::vector<double>{1, 1}));
      EXPECT_EQ(b.ToVector<double>(), (std::vector<double>{2, 2}));
    }
  });
}

// torch's recv(src=None): each receive takes a send to it from any rank, in posting order per sender
// (rank 1's two sends arrive in order), and names its sender; specific receives still match their rank.
TEST(ThreadsErrorsTest, RecvFromAnyRankTakesEachSendOnceAndNamesItsSender) {
  RunRanks(3, [](ProcessGroupPtr pg) {
    if (pg->rank() == 0) {
      std::vector<std::pair<int, double>> got;  // (sender, value)
      for (int i = 0; i < 3; ++i) {
        Tensor t = Zeros({2});
        const WorkPtr w = pg->RecvAnySource(t, 4);
        w->Wait();
        got.emplace_back(w->SourceRank(), t.ToVector<double>()[0]);
        EXPECT_EQ(t.ToVector<double>()[1], got.back().second);
      }
      Tensor last = Zeros({2});
      pg->Recv(last, 2, 5)->Wait();
      EXPECT_EQ(last.ToVector<double>(), (std::vector<double>(2, 25)));
      std::vector<double> from_one;
      for (const auto& [src, v] : got) {
        EXPECT_EQ(static_cast<int>(v) / 10, src);  // rank r sent 10 r + k
        if (src == 1) from_one.push_back(v);
      }
      EXPECT_EQ(from_one, (std::vector<double>{10, 11}));
      EXPECT_EQ(pg->Barrier()->SourceRank(), -1);  // not a receive from any rank
    } else if (pg->rank() == 1) {
      pg->Send(Full({2}, 10), 0, 4);
      pg->Send(Full({2}, 11), 0, 4)->Wait();
      pg->Barrier()->Wait();
    } else {
      pg->Send(Full({2}, 20), 0, 4);
      pg->Send(Full({2}, 25), 0, 5)->Wait();  // another tag: only the specific receive takes it
      pg->Barrier()->Wait();
    }
  });
}

TEST(ThreadsErrorsTest, RecvFromAnyRankFailsAtOnceWhenEveryOtherRankIsGoneAndTimesOutOtherwise) {
  RunRanks(3, [](ProcessGroupPtr pg) {
    if (pg->rank() != 0) return;  // ranks 1 and 2 leave without sending
    ExpectErrorContains([&] { pg->RecvAnySource(Zeros({2}), 3)->Wait(); }, ErrorCode::kAborted,
                        {"recv from any rank (tag 3, 8 B, float32)", "every other rank already returned"});
  }, {.timeout = milliseconds(60000)});
  RunRanks(2, [](ProcessGroupPtr pg) {
    if (pg->rank() == 0) {
      pg->set_timeout(milliseconds(300));
      ExpectErrorContains([&] { pg->RecvAnySource(Zeros({2}), 5)->Wait(); }, ErrorCode::kDeadlineExceeded,
                          {"timed out after 300 ms", "recv from any rank (tag 5, 8 B, float32)"});
      pg->set_timeout(kDefaultTimeout);
    }
    pg->Barrier()->Wait();  // the cancelled receive left nothing behind: a later send matches a later receive
    Tensor t = Zeros({1});
    const WorkPtr w = pg->rank() == 1 ? pg->Send(Full({1}, 7), 0, 5) : pg->RecvAnySource(t, 5);
    w->Wait();
    if (pg->rank() == 0) {
      EXPECT_EQ(w->SourceRank(), 1);
      EXPECT_EQ(t.ToVector<double>(), std::vector<double>{7});
    }
  });
}

TEST(ThreadsErrorsTest, UnmatchedRecvTimesOutAndMismatchedSizesAbort) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    if (pg->rank() == 0) {
      pg->set_timeout(milliseconds(300));
      ExpectErrorContains([&] { pg->Recv(Zeros({2}), 1, 5)->Wait(); }, ErrorCode::kDeadlineExceeded,
                  {"timed out after 300 ms", "recv from rank 1 (tag 5, 8 B, float32)"});
      pg->set_timeout(kDefaultTimeout);
    } else {
      std::this_thread::sleep_for(milliseconds(600));  // busy, not blocked: no deadlock, only the timeout
    }
    pg->Barrier()->Wait();  // a p2p timeout leaves the group usable
    const WorkPtr w = pg->rank() == 0 ? pg->Send(Zeros({2}), 1) : pg->Recv(Zeros({3}), 0);
    ExpectErrorContains([&] { w->Wait(); }, ErrorCode::kAborted, {"p2p mismatch", "send to rank 1", "recv from rank 0"});
  });
}

// A send or receive whose peer went on to a collective of the group (a pipeline stage that ran one step more than
// its peer, which then called barrier): every rank raises the deadlock at once, not the group timeout, whether the
// p2p or the collective blocks last and whether the peer had posted on the group before.
TEST(ThreadsErrorsTest, ASendOrReceiveAgainstAPeersBarrierIsADeadlockOnBothRanksAtOnce) {
  for (const bool p2p_first : {true, false}) {
    for (const bool history : {false, true}) {
      const auto start = std::chrono::steady_clock::now();
      RunRanks(2, [&](ProcessGroupPtr pg) {
        if (history) {  // one good exchange first: rank 1's p2p queue exists, idle
          const WorkPtr w = pg->rank() == 0 ? pg->Send(Ones({2}), 1, 3) : pg->Recv(Zeros({2}), 0, 3);
          w->Wait();
        }
        if (pg->rank() == 0) {
          if (!p2p_first) std::this_thread::sleep_for(milliseconds(100));
          const bool send = history;  // (both directions)
          ExpectErrorContains([&] { (send ? pg->Send(Ones({2}), 1) : pg->Recv(Zeros({2}), 1))->Wait(); },
                              ErrorCode::kAborted,
                              {"deadlock: rank 0 waits in ", send ? "send to rank 1 (tag 0, 8 B, float32)"
                                                                   : "recv from rank 1 (tag 0, 8 B, float32)",
                               "which has not posted its side; rank 1 waits in barrier #", "which has not issued it",
                               "a send or receive waits for a rank that is inside a collective"});
        } else {
          if (p2p_first) std::this_thread::sleep_for(milliseconds(100));
          ExpectErrorContains([&] { pg->Barrier()->Wait(); }, ErrorCode::kAborted,
                              {"deadlock: rank 0 waits in ", "rank 1 waits in barrier #"});
        }
      });
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << p2p_first << history;
    }
  }
}

TEST(ThreadsErrorsTest, AllToAllSplitDisagreementAbortsEveryRank) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    // rank 0 claims to send 1 row to rank 1, rank 1 expects 2 rows from rank 0.
    std::vector<int64_t> in = {1, 1}, out = pg->rank() == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{2, 0};
    ExpectErrorContains([&] { pg->AllToAll(Zeros({2}), Zeros({2}), out, in)->Wait(); }, ErrorCode::kAborted,
                {"rank 1 expects 2 rows from rank 0 but rank 0 sends 1 rows to rank 1"});
  });
}

TEST(ThreadsErrorsTest, BadArgumentsThrowOnTheCallerBeforeAnyCommunication) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    ExpectErrorContains([&] { pg->AllGather(Zeros({3}), Zeros({2})); }, ErrorCode::kInvalidArgument,
                {"all_gather: output shape [3] must be [4] (2 ranks x [2])"});
    ExpectErrorContains([&] { pg->ReduceScatter(Zeros({2}), Zeros({2}, DType::kFloat64), ReduceOp::kSum); },
                ErrorCode::kInvalidArgument, {"reduce_scatter: output dtype float32 differs from input dtype float64"});
    ExpectErrorContains([&] { pg->AllReduce(Zeros({2}, DType::kInt64), ReduceOp::kAvg); }, ErrorCode::kInvalidArgument,
                {"all_reduce: avg needs a floating dtype, got int64"});
    ExpectErrorContains([&] { pg->Broadcast(Zeros({2}), 2); }, ErrorCode::kInvalidArgument, {"root 2"});
    ExpectErrorContains([&] { pg->AllToAll(Zeros({3}), Zeros({3}), {}, {}); }, ErrorCode::kInvalidArgument,
                {"dim 0 (3) must divide by the group size 2"});
    ExpectErrorContains([&] { pg->Send(Zeros({2}), pg->rank()); }, ErrorCode::kInvalidArgument, {"is not another rank"});
    ExpectErrorContains([&] { pg->NewGroup({0, 0}); }, ErrorCode::kInvalidArgument, {"listed twice"});
    pg->Barrier()->Wait();  // nothing above consumed a sequence number
  });
}

// --max-restarts in process: a rank that throws in attempt 0 (its peers blocked in a collective fail fast)
// makes every rank run again on a fresh world; attempt 1 succeeds and sees a working all_reduce.
TEST(ThreadsErrorsTest, RunRanksWithRestartsRunsEveryRankAgainAfterOneRankFails) {
  std::atomic<int> calls{0};
  std::vector<double> sums(4, -1);
  const auto start = Clock::now();
  const int restarts = RunRanksWithRestarts(4, 2, [&](ProcessGroupPtr pg, int attempt) {
    ++calls;
    if (attempt == 0 && pg->rank() == 2) TESSEL_FAIL(ErrorCode::kInternal, "injected fault");
    Tensor t = Full({1}, pg->rank() + 1);
    pg->AllReduce(t, ReduceOp::kSum)->Wait();
    sums[pg->rank()] = t.item<double>();
  });
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(calls.load(), 8);  // 4 ranks x 2 attempts
  EXPECT_EQ(sums, std::vector<double>(4, 1 + 2 + 3 + 4));
  EXPECT_LT(Seconds(start), 30.0) << "the peers of the failed rank waited for the timeout";
}

TEST(ThreadsErrorsTest, RunRanksWithRestartsRethrowsTheLastAttemptsErrorWhenOutOfRestarts) {
  int attempts_seen = 0;
  ExpectErrorContains(
      [&] {
        RunRanksWithRestarts(2, 1, [&](ProcessGroupPtr pg, int attempt) {
          if (pg->rank() == 0) attempts_seen = attempt + 1;
          if (pg->rank() == 1) TESSEL_FAIL(ErrorCode::kDataLoss, "fault in attempt ", attempt);
          pg->Barrier()->Wait();
        });
      },
      ErrorCode::kDataLoss, {"fault in attempt 1"});
  EXPECT_EQ(attempts_seen, 2);
  ExpectErrorContains([] { RunRanksWithRestarts(2, -1, [](ProcessGroupPtr, int) {}); }, ErrorCode::kInvalidArgument,
                      {"max_restarts must be >= 0, got -1"});
}

// Rank 0 all-reduces on a sub-group while rank 1 all-reduces on the world: each waits for a call the other
// will never issue. Both raise the same kAborted naming both calls, groups and ranks, long before the timeout.
// Ranks that create groups in different orders (or with different lists) raise at the new_group itself,
// naming both calls, instead of each timing out in a collective on a group the other never joined.
TEST(ThreadsErrorsTest, NewGroupsCreatedInDifferentOrdersRaiseAtOnceNamingBothCalls) {
  std::vector<std::string> messages(2);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(120);
  const auto start = Clock::now();
  RunRanks(3, [&](ProcessGroupPtr pg) {
    try {
      if (pg->rank() == 0) {
        pg->NewGroup({0, 1});
      } else {
        pg->NewGroup({1, 2});
      }
      ADD_FAILURE() << "rank " << pg->rank() << ": the disagreement was not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      if (pg->rank() < 2) messages[static_cast<size_t>(pg->rank())] = e.what();
    }
  }, options);
  EXPECT_LT(Seconds(start), 10.0);
  for (const std::string& m : messages) {
    for (const char* fragment : {"new_group on group 'world' (global ranks [0, 1, 2]): the ranks disagree",
                                 "is at its new_group #0 with 2 ranks [0, ..., 1]",
                                 "is at its new_group #0 with 2 ranks [1, ..., 2]"}) {
      EXPECT_NE(m.find(fragment), std::string::npos) << m;
    }
  }
  // The tracer does not count the agreement: it is not a collective of the program.
  RunRanks(2, [&](ProcessGroupPtr pg) {
    CommTracer tracer;
    ProcessGroupPtr sub = pg->NewGroup({0, 1});
    EXPECT_EQ(tracer.Total(), 0) << tracer.Summary();
  });
}

TEST(ThreadsErrorsTest, CollectivesOnDifferentGroupsRaiseADeadlockOnBothRanksWellBeforeTheTimeout) {
  std::vector<std::string> messages(2);
  std::vector<double> seconds(2);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(120);
  RunRanks(2, [&](ProcessGroupPtr pg) {
    ProcessGroupPtr sub = pg->NewGroup({0, 1});
    const auto start = Clock::now();
    try {
      (pg->rank() == 0 ? sub : pg)->AllReduce(Ones({4}), ReduceOp::kSum)->Wait();
      ADD_FAILURE() << "deadlock not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted);
      messages[pg->rank()] = e.what();
    }
    seconds[pg->rank()] = Seconds(start);
  }, options);
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(seconds[r], 10.0) << "rank " << r << " waited for the timeout";
    for (const char* fragment :
         {"deadlock: ", "rank 0 waits in all_reduce #0 (16 B, float32, sum) on group 'world.0' (global ranks [0, 1]) "
                        "for rank 1, which has not issued it",
          // #1: the world's call #0 was new_group's agreement exchange (comm/process_group.h).
          "rank 1 waits in all_reduce #1 (16 B, float32, sum) on group 'world' (global ranks [0, 1]) for rank 0",
          "issued collectives on different groups in different orders"}) {
      EXPECT_NE(messages[r].find(fragment), std::string::npos) << "rank " << r << ": " << messages[r];
    }
  }
}

// Three ranks each receive from the previous one before sending to the next (blocking): a ring of p2p
// queues each waiting for a post the next never makes. Every rank raises the cycle at once, naming its
// three receives; the same ring posted as one batch per rank completes.
TEST(ThreadsErrorsTest, ReceivesThatWaitForEachOtherInARingRaiseADeadlockOnEveryRankAtOnce) {
  std::vector<std::string> messages(3);
  std::vector<double> seconds(3);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(120);
  RunRanks(3, [&](ProcessGroupPtr pg) {
    const int r = pg->rank(), prev = (r + 2) % 3, next = (r + 1) % 3;
    const auto start = Clock::now();
    try {
      pg->Recv(Zeros({2}), prev, 7)->Wait();
      pg->Send(Ones({2}), next, 7)->Wait();
      ADD_FAILURE() << "deadlock not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted);
      messages[r] = e.what();
    }
    seconds[r] = Seconds(start);
    // One batch: every receive finds its send; each rank gets its predecessor's value.
    Tensor got = Zeros({2});
    pg->BatchP2P({{P2POp::Kind::kSend, Full({2}, r), next, 8}, {P2POp::Kind::kRecv, got, prev, 8}})->Wait();
    EXPECT_EQ(got.ToVector<double>(), std::vector<double>(2, prev));
  }, options);
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(seconds[r], 10.0) << "rank " << r << " waited for the timeout";
    EXPECT_EQ(messages[r].rfind(
                  "deadlock: rank 0 waits in recv from rank 2 (tag 7, 8 B, float32) on group 'world' (global "
                  "ranks [0, 1, 2]) for rank 2, which has not posted its side; rank 2 waits in recv from rank 1 "
                  "(tag 7, 8 B, float32) on group 'world' (global ranks [0, 1, 2]) for rank 1, which has not posted "
                  "its side; rank 1 waits in recv from rank 0",
                  0),
              0u)
        << "rank " << r << ": " << messages[r];
    EXPECT_NE(messages[r].find("post each exchange as one batch_isend_irecv"), std::string::npos) << messages[r];
  }
}

// 4 ranks, a (2, 2) mesh's row group {0, 1}: rank 0 on the row, ranks 1-3 on the world. Every rank waiting in
// one of the two calls raises (ranks 2 and 3 too), and the groups refuse later calls instead of hanging.
TEST(ThreadsErrorsTest, ADeadlockBetweenASubGroupAndTheWorldFailsEveryRankWaitingInEitherCall) {
  std::vector<std::string> messages(4);
  std::vector<std::string> later(4);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(120);
  const auto start = Clock::now();
  RunRanks(4, [&](ProcessGroupPtr pg) {
    ProcessGroupPtr row = pg->NewGroup({0, 1});
    pg->NewGroup({2, 3});
    try {
      (pg->rank() == 0 ? row : pg)->AllGather(Zeros({4 * (pg->rank() == 0 ? 2 : 4)}), Ones({4}))->Wait();
      ADD_FAILURE() << "deadlock not detected";
    } catch (const Error& e) {
      messages[pg->rank()] = Str(static_cast<int>(e.code()), " ", e.what());
    }
    try {
      pg->Barrier()->Wait();
    } catch (const Error& e) {
      later[pg->rank()] = e.what();
    }
  }, options);
  EXPECT_LT(Seconds(start), 10.0);
  for (int r = 0; r < 4; ++r) {
    // Ranks 2 and 3 may post after the verdict: then the broken group refuses the call, naming the deadlock.
    EXPECT_EQ(messages[r].rfind(Str(static_cast<int>(ErrorCode::kAborted), " "), 0), 0u) << messages[r];
    EXPECT_NE(messages[r].find("deadlock: "), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("rank 0 waits in all_gather #0 (16 B, float32) on group 'world.0' (global ranks [0, 1])"),
              std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("on group 'world' (global ranks [0, 1, 2, 3]) for rank 0"), std::string::npos)
        << messages[r];
    // (rank 0's barrier is call #0 of the world, the deadlocked call itself: it gets the verdict directly.)
    EXPECT_NE(later[r].find("deadlock: rank 0 waits in all_gather #0"), std::string::npos) << later[r];
  }
}

// Not a deadlock: each rank issues both calls (asynchronously, in opposite orders) before waiting, so each
// group's call is issued by every member; both complete with the right sums.
TEST(ThreadsErrorsTest, AsyncCallsOnTwoGroupsInOppositeOrdersCompleteWithoutADeadlockError) {
  RunRanks(2, [&](ProcessGroupPtr pg) {
    ProcessGroupPtr sub = pg->NewGroup({0, 1});
    Tensor a = Full({4}, pg->rank() + 1), b = Full({4}, 10 * (pg->rank() + 1));
    WorkPtr first = pg->rank() == 0 ? sub->AllReduce(a, ReduceOp::kSum) : pg->AllReduce(b, ReduceOp::kSum);
    WorkPtr second = pg->rank() == 0 ? pg->AllReduce(b, ReduceOp::kSum) : sub->AllReduce(a, ReduceOp::kSum);
    first->Wait();
    second->Wait();
    EXPECT_EQ(a.ToVector<double>(), std::vector<double>(4, 3));
    EXPECT_EQ(b.ToVector<double>(), std::vector<double>(4, 30));
  });
}

}  // namespace
}  // namespace tessel::comm
