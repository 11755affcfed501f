// Runs in every process of a tessel-run job (see gloo_test.sh): the gloo backend's collectives,
// p2p, sub-groups, mismatch and timeout errors, checked against naive expectations. All processes
// run the same tests in the same order, as collectives require.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/backends/gloo.h"
#include "comm/collective.h"
#include "comm/tracer.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "core/base/testing/expect_error.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

ProcessGroup& World() {
  static ProcessGroupPtr pg = [] {
    ProcessGroupPtr p = InitProcessGroupFromEnv();
    p->set_timeout(milliseconds(20000));
    return p;
  }();
  return *pg;
}

double Val(int rank, int64_t i, int salt) { return static_cast<double>((rank * 3 + i * 7 + salt) % 5) - 2; }

std::vector<double> Vals(int rank, int64_t n, int salt) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Val(rank, i, salt);
  return v;
}

using ::tessel::testing::ExpectErrorContains;

TEST(GlooTest, AllReduceMatchesNaiveLoopsForEveryOpAndDType) {
  ProcessGroup& pg = World();
  const int w = pg.size();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt64,
                      DType::kInt32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
      if (op == ReduceOp::kAvg && !IsFloating(dtype)) continue;
      for (int64_t n : {0, 5, 12}) {
        SCOPED_TRACE(Str(dtype, " ", ReduceOpName(op), " n=", n));
        Tensor t = FromDoubles(Vals(pg.rank(), n, 1), Shape{n}, dtype);
        pg.AllReduce(t, op)->Wait();
        std::vector<double> want(n);
        for (int64_t i = 0; i < n; ++i) {
          double acc = Val(0, i, 1);
          for (int r = 1; r < w; ++r) {
            const double x = Val(r, i, 1);
            acc = op == ReduceOp::kMax ? std::max(acc, x)
                  : op == ReduceOp::kMin ? std::min(acc, x)
                  : op == ReduceOp::kProduct ? acc * x
                                             : acc + x;
          }
          if (op == ReduceOp::kAvg) acc = dtype == DType::kFloat64 ? acc / w : static_cast<float>(acc) / w;
          want[i] = acc;
        }
        EXPECT_EQ(t.ToDoubleVector(), FromDoubles(want, Shape{n}, dtype).ToDoubleVector());
      }
    }
  }
}

TEST(GlooTest, LargeAllReduceSpansManyGlooSegments) {
  ProcessGroup& pg = World();
  const int64_t n = 300001;  // > 1 MiB: several segments, not a multiple of anything
  Tensor t = Full({n}, pg.rank() + 1.0);
  pg.AllReduce(t, ReduceOp::kSum)->Wait();
  const double want = pg.size() * (pg.size() + 1) / 2.0;
  const std::vector<double> got = t.ToDoubleVector();
  EXPECT_EQ(got.front(), want);
  EXPECT_EQ(got[n / 2], want);
  EXPECT_EQ(got.back(), want);
}

TEST(GlooTest, AllGatherReduceScatterAndBroadcastMatchNaiveLoops) {
  ProcessGroup& pg = World();
  const int w = pg.size(), me = pg.rank();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    SCOPED_TRACE(Str(dtype));
    Tensor out = Zeros({w * 3}, dtype);
    pg.AllGather(out, FromDoubles(Vals(me, 3, 2), Shape{3}, dtype))->Wait();
    std::vector<double> gathered;
    for (int r = 0; r < w; ++r)
      for (double v : Vals(r, 3, 2)) gathered.push_back(v);
    EXPECT_EQ(out.ToDoubleVector(), gathered);

    Tensor rs = Zeros({2, 2}, dtype);
    pg.ReduceScatter(rs, FromDoubles(Vals(me, w * 4, 3), Shape{w * 2, 2}, dtype), ReduceOp::kSum)->Wait();
    std::vector<double> reduced(4, 0);
    for (int r = 0; r < w; ++r)
      for (int64_t i = 0; i < 4; ++i) reduced[i] += Val(r, me * 4 + i, 3);
    EXPECT_EQ(rs.ToDoubleVector(), reduced);

    Tensor b = FromDoubles(Vals(me, 4, 6), Shape{4}, dtype);
    pg.Broadcast(b, w - 1)->Wait();
    EXPECT_EQ(b.ToDoubleVector(), Vals(w - 1, 4, 6));
  }
  pg.Barrier()->Wait();
}

TEST(GlooTest, AllToAllMovesUnevenSplits) {
  ProcessGroup& pg = World();
  const int w = pg.size(), me = pg.rank();
  auto rows = [](int src, int dst) { return static_cast<int64_t>((src + 2 * dst) % 3); };
  std::vector<int64_t> in_splits, out_splits;
  int64_t in_rows = 0, out_rows = 0;
  for (int j = 0; j < w; ++j) {
    in_splits.push_back(rows(me, j)), out_splits.push_back(rows(j, me));
    in_rows += rows(me, j), out_rows += rows(j, me);
  }
  std::vector<double> in_vals;  // row k of rank r holds 100 r + k, twice
  for (int64_t k = 0; k < in_rows; ++k) in_vals.push_back(100 * me + k), in_vals.push_back(100 * me + k);
  Tensor out = Full({out_rows, 2}, -1);
  pg.AllToAll(out, FromDoubles(in_vals, Shape{in_rows, 2}), out_splits, in_splits)->Wait();
  std::vector<double> want;
  for (int j = 0; j < w; ++j) {
    int64_t first = 0;
    for (int k = 0; k < me; ++k) first += rows(j, k);
    for (int64_t k = first; k < first + rows(j, me); ++k) want.push_back(100 * j + k), want.push_back(100 * j + k);
  }
  EXPECT_EQ(out.ToDoubleVector(), want);
}

// The last rank sends and receives nothing (an idle MoE rank); the others swap rows. It used to return
// without calling gloo, and its peers waited for its zero-byte messages until the timeout.
TEST(GlooTest, AllToAllWithAnIdleRankFinishesAtOnce) {
  ProcessGroup& pg = World();
  const int w = pg.size(), me = pg.rank();
  if (w < 2) GTEST_SKIP() << "needs 2 ranks";
  auto rows = [w](int src, int dst) { return src == w - 1 || dst == w - 1 ? int64_t{0} : int64_t{1}; };
  std::vector<int64_t> in_splits, out_splits;
  int64_t in_rows = 0, out_rows = 0;
  for (int j = 0; j < w; ++j) {
    in_splits.push_back(rows(me, j)), out_splits.push_back(rows(j, me));
    in_rows += rows(me, j), out_rows += rows(j, me);
  }
  std::vector<double> in_vals;  // row k of rank r holds 10 r + k
  for (int64_t k = 0; k < in_rows; ++k) in_vals.push_back(10 * me + k);
  Tensor out = Full({out_rows, 1}, -1);
  const auto start = Clock::now();
  pg.AllToAll(out, FromDoubles(in_vals, Shape{in_rows, 1}), out_splits, in_splits)->Wait();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  std::vector<double> want;  // from rank j: its row number `me` (it sends one row to each active rank)
  for (int j = 0; j < w; ++j) {
    if (rows(j, me) == 1) want.push_back(10 * j + me);
  }
  EXPECT_EQ(out.ToDoubleVector(), want);
  pg.Barrier()->Wait();
}

TEST(GlooTest, BatchedSendRecvRingExchangesBothWays) {
  ProcessGroup& pg = World();
  const int w = pg.size(), r = pg.rank();
  if (w < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  Tensor from_prev = Zeros({3}), from_next = Zeros({2});
  pg.BatchP2P({{P2POp::Kind::kSend, Full({3}, r), next, 1},
               {P2POp::Kind::kSend, Full({2}, 10 * r), prev, 2},
               {P2POp::Kind::kRecv, from_next, next, 2},
               {P2POp::Kind::kRecv, from_prev, prev, 1}})
      ->Wait();
  EXPECT_EQ(from_prev.ToVector<double>(), (std::vector<double>(3, prev)));
  EXPECT_EQ(from_next.ToVector<double>(), (std::vector<double>(2, 10 * next)));
}

// torch's recv(src=None) on gloo (recvAnysource): rank 0 takes one send from every other rank, each named by
// its sender; a rank's two sends arrive in order; a size mismatch is the same error as for Recv.
TEST(GlooTest, RecvFromAnyRankTakesEverySenderOnceAndNamesIt) {
  ProcessGroup& pg = World();
  const int w = pg.size(), r = pg.rank();
  if (w < 2) {
    ExpectErrorContains([&] { pg.RecvAnySource(Zeros({1}), 6); }, ErrorCode::kInvalidArgument, {"no other rank"});
    GTEST_SKIP() << "needs 2 ranks";
  }
  if (r == 0) {
    std::vector<int> senders;
    std::vector<double> from_one;
    for (int i = 0; i < w; ++i) {  // w - 1 ranks send once, rank 1 twice
      Tensor t = Full({3}, -1.0);
      const WorkPtr work = pg.RecvAnySource(t, 6);
      work->Wait();
      const int src = work->SourceRank();
      EXPECT_EQ(t.ToVector<double>(), std::vector<double>(3, 10.0 * src + (src == 1 ? from_one.size() : 0)));
      if (src == 1) from_one.push_back(t.ToVector<double>()[0]);
      senders.push_back(src);
    }
    std::sort(senders.begin(), senders.end());
    std::vector<int> want{1};
    for (int j = 1; j < w; ++j) want.push_back(j);
    EXPECT_EQ(senders, want);
    EXPECT_EQ(from_one, (std::vector<double>{10, 11}));
    ExpectErrorContains([&] { pg.RecvAnySource(Zeros({4}), 7)->Wait(); }, ErrorCode::kAborted,
                        {"p2p mismatch", "rank 1 posted send to rank 0 (tag 7, 8 B)", "recv from rank 1"});
  } else {
    pg.Send(Full({3}, 10.0 * r), 0, 6)->Wait();
    if (r == 1) {
      pg.Send(Full({3}, 11.0), 0, 6)->Wait();
      ExpectErrorContains([&] { pg.Send(Full({2}, 1.0), 0, 7)->Wait(); }, ErrorCode::kAborted,  // the same message
                          {"p2p mismatch", "rank 1 posted send to rank 0 (tag 7, 8 B)", "recv from rank 1"});
    }
  }
  pg.Barrier()->Wait();
}

// Gloo compares nothing itself: a shorter send left the receive's tail stale, another dtype was read bit
// for bit, and a longer send aborted the receiving process inside gloo. Both sides now raise the same "p2p
// mismatch" (the sender from the receiver's verdict; it used to return as if delivered), and the group stays
// usable.
TEST(GlooTest, SendRecvSizeOrDtypeMismatchIsAbortedOnBothSides) {
  ProcessGroup& pg = World();
  const int w = pg.size(), r = pg.rank();
  if (w < 2) GTEST_SKIP() << "needs 2 ranks";
  if (r < 2) {
    const int peer = 1 - r;
    struct Case {
      Tensor send, recv;
      const char* what;
    };
    for (const Case& c : {Case{Full({2}, 7.0), Full({4}, -1.0), "(tag 0, 8 B) float32"},
                          Case{Full({8}, 7.0), Full({4}, -1.0), "(tag 0, 32 B) float32"},
                          Case{Full({4}, 7.0), Full({4}, -1.0, DType::kInt32), "(tag 0, 16 B) float32"}}) {
      ExpectErrorContains([&] { (r == 0 ? pg.Send(c.send, peer) : pg.Recv(c.recv, peer))->Wait(); },
                          ErrorCode::kAborted,
                          {"p2p mismatch", Str("rank 0 posted send to rank 1 ", c.what, " but rank 1 posted recv from ",
                                               "rank 0 (global 0, tag 0, 16 B) ", DTypeName(c.recv.dtype()))});
      if (r == 1) EXPECT_EQ(c.recv.ToVector<double>(), std::vector<double>(4, -1.0));  // untouched
    }
    Tensor ok = Full({3}, -1.0);
    (r == 0 ? pg.Send(Full({3}, 5.0), peer) : pg.Recv(ok, peer))->Wait();  // still usable, still in step
    if (r == 1) EXPECT_EQ(ok.ToVector<double>(), std::vector<double>(3, 5.0));
  }
  pg.Barrier()->Wait();
}

TEST(GlooTest, SubgroupsAndTracerSeeOnlyTheirMembers) {
  ProcessGroup& pg = World();
  const int w = pg.size(), r = pg.rank();
  std::vector<int> evens;
  for (int j = 0; j < w; j += 2) evens.push_back(j);
  ProcessGroupPtr sub = pg.NewGroup(evens);
  EXPECT_EQ(sub != nullptr, r % 2 == 0);
  if (sub) {
    sub->set_name("dp");
    CommTracer tracer;
    Tensor t = Full({2}, r);
    sub->AllReduce(t, ReduceOp::kSum)->Wait();
    double want = 0;
    for (int j : evens) want += j;
    EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(2, want)));
    EXPECT_EQ(tracer.Summary(), "all_reduce(dp) x1");
    EXPECT_EQ(sub->backend_name(), "gloo");
  }
  pg.Barrier()->Wait();
}

TEST(GlooTest, GroupsThatSomeMembersDropAtOnceStillConstructOnTheOthers) {
  // torch code builds and drops meshes freely (a helper's init_device_mesh, `del mesh`): rank 0 destroys
  // each new group as soon as it returns, closing its pairs while the others may still be posting their
  // liveness receives on them. Those members must get the group (its later collectives would name rank 0
  // as gone), not "connection closed by peer" from the constructor.
  ProcessGroup& pg = World();
  std::vector<int> all;
  for (int j = 0; j < pg.size(); ++j) all.push_back(j);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    ProcessGroupPtr g;
    EXPECT_NO_THROW(g = pg.NewGroup(all));
    EXPECT_TRUE(g != nullptr);
    if (pg.rank() == 0) g.reset();
  }
  Tensor t = Ones({2});  // the world is unaffected
  pg.AllReduce(t, ReduceOp::kSum)->Wait();
  EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(2, pg.size())));
}

TEST(GlooTest, TheProcessServingTheStoreReturnsOnlyAfterEveryMemberReadTheConnectBarrier) {
  // Outside a launcher that serves the store, rank 0's process serves it: had its group constructor returned as
  // soon as it set the barrier key, a rank 0 that then exited cut off members still polling for that key ("lost the
  // connection to the store server"). Rank 0 serves a fresh store here and builds a group through it last.
  ProcessGroup& pg = World();
  if (pg.size() == 1) GTEST_SKIP() << "one process: no barrier";
  std::shared_ptr<TcpStore> store;
  Tensor port = Zeros({1});
  if (pg.rank() == 0) {
    store = std::make_shared<TcpStore>("127.0.0.1", 0, /*is_server=*/true, milliseconds(20000));
    port = Full({1}, store->port());
  }
  pg.Broadcast(port, 0)->Wait();
  if (pg.rank() != 0) {
    store = std::make_shared<TcpStore>("127.0.0.1", static_cast<int>(port.ToVector<double>()[0]), false,
                                       milliseconds(20000));
  } else {
    std::this_thread::sleep_for(milliseconds(300));  // the others are polling for the barrier key by then
  }
  GlooOptions options;
  options.timeout = milliseconds(20000);
  ProcessGroupPtr g = NewGlooProcessGroup(store, "serving/", pg.rank(), pg.size(), options);
  if (pg.rank() == 0) EXPECT_EQ(store->Add("serving/read_all", 0), pg.size());  // every member has read it
  g.reset();
  pg.Barrier()->Wait();
}

TEST(GlooTest, MismatchedCollectivesRaiseTheSameErrorOnEveryProcess) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  ExpectErrorContains(
      [&] {
        if (pg.rank() == 0) {
          pg.ReduceScatter(Zeros({4}), Zeros({4 * pg.size()}), ReduceOp::kSum)->Wait();
        } else {
          pg.AllGather(Zeros({4 * pg.size()}), Zeros({4}))->Wait();
        }
      },
      ErrorCode::kAborted,
      {Str("rank 1 called all_gather #"), " (16 B) while rank 0 called reduce_scatter #", "collective mismatch"});
  Tensor t = Ones({3});  // the group is still usable
  pg.AllReduce(t, ReduceOp::kSum)->Wait();
  EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(3, pg.size())));
}

// Labels cross the wire as a hash and the text's tail: two long labels that differ only in their last characters
// (as sibling groups' names do) are a mismatch, named by those tails in whole UTF-8 characters; equal labels pass.
TEST(GlooTest, CollectiveLabelsAreComparedAndNamedAcrossProcesses) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string stem = "fully_shard 'model.encoder.blocks.\u00e9t\u00e9.sub_layers.attention_block.";
  {
    CollectiveLabel same(stem + "q_proj'");
    Tensor t = Ones({2});
    pg.AllReduce(t, ReduceOp::kSum)->Wait();
    EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(2, pg.size())));
  }
  ExpectErrorContains(
      [&] {
        CollectiveLabel label(stem + (pg.rank() == 0 ? "q_proj'" : "k_proj'"));
        pg.AllReduce(Zeros({2}), ReduceOp::kSum)->Wait();
      },
      ErrorCode::kAborted,
      {"collective mismatch", "(8 B, float32, sum) for ", "k_proj' while rank 0 called all_reduce #", "q_proj'"});
  Tensor t = Ones({3});  // the group is still usable
  pg.AllReduce(t, ReduceOp::kSum)->Wait();
  EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(3, pg.size())));
}

TEST(GlooTest, SameBytesOfDifferentShapesAreAMismatchOnEveryProcess) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const bool first = pg.rank() == 0;
  ExpectErrorContains([&] { pg.AllReduce(Zeros(first ? Shape{2, 3} : Shape{3, 2}), ReduceOp::kSum)->Wait(); },
                      ErrorCode::kAborted,
                      {"(24 B of shape [3, 2], float32, sum) while rank 0 called all_reduce #",
                       "(24 B of shape [2, 3], float32, sum)", "collective mismatch"});
  Tensor t = Ones({2, 3});
  pg.AllReduce(t, ReduceOp::kSum)->Wait();
  EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(6, pg.size())));
}

TEST(GlooTest, MissingProcessRaisesDeadlineExceededNamingIt) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all;
  for (int j = 0; j < pg.size(); ++j) all.push_back(j);
  ProcessGroupPtr sub = pg.NewGroup(all);
  sub->set_timeout(milliseconds(1000));
  const int last = pg.size() - 1;
  if (pg.rank() != last) {
    const auto start = Clock::now();
    ExpectErrorContains([&] { sub->AllReduce(Zeros({4}), ReduceOp::kSum)->Wait(); }, ErrorCode::kDeadlineExceeded,
                {"timed out after 1000 ms", Str("rank(s) ", last, " (global ", last, ") never arrived")});
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
    ExpectErrorContains([&] { sub->Barrier()->Wait(); }, ErrorCode::kAborted, {"unusable"});
  } else {
    // Busy elsewhere, not blocked in a collective (waiting in the world barrier at once would be a
    // deadlock across groups, reported as such before the timeout: the next test).
    std::this_thread::sleep_for(milliseconds(1500));
    // Then late: the peers gave up and Gloo closed their pairs; the verdict they left in the store says
    // so (it read "the process exited or died" for live peers).
    ExpectErrorContains([&] { sub->AllReduce(Zeros({4}), ReduceOp::kSum)->Wait(); }, ErrorCode::kDeadlineExceeded,
                        {"came too late", "gave up waiting for this rank and closed the connection",
                         Str("never arrived")});
  }
  pg.Barrier()->Wait();  // the world group is unaffected
}

// Rank 0 all-reduces on group A while every other rank all-reduces on group B (both span all ranks): a
// certain deadlock. Every rank raises kAborted naming both calls and groups, within seconds (the groups'
// timeout is 20 s): the processes' monitors compare snapshots through the store (gloo_wait_monitor.h).
TEST(GlooTest, CollectivesOnDifferentGroupsRaiseADeadlockOnEveryProcessWellBeforeTheTimeout) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all;
  for (int j = 0; j < pg.size(); ++j) all.push_back(j);
  ProcessGroupPtr a = pg.NewGroup(all), b = pg.NewGroup(all);  // fresh groups: the deadlock breaks them
  const auto start = Clock::now();
  const std::string a_label = Str("on group '", a->name(), "'"), b_label = Str("on group '", b->name(), "'");
  ExpectErrorContains([&] { (pg.rank() == 0 ? a : b)->AllReduce(Ones({4}), ReduceOp::kSum)->Wait(); },
                      ErrorCode::kAborted,
                      {"deadlock: rank 0 waits in all_reduce #0 (16 B, float32, sum) " + a_label,
                       "waits in all_reduce #0 (16 B, float32, sum) " + b_label, "for rank 0, which has not issued it",
                       "issued collectives on different groups in different orders"});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  // Async calls on the two groups in opposite orders are no deadlock: both complete.
  ProcessGroupPtr c = pg.NewGroup(all), e = pg.NewGroup(all);
  Tensor x = Ones({4}), y = Full({4}, 2);
  WorkPtr first = pg.rank() == 0 ? c->AllReduce(x, ReduceOp::kSum) : e->AllReduce(y, ReduceOp::kSum);
  WorkPtr second = pg.rank() == 0 ? e->AllReduce(y, ReduceOp::kSum) : c->AllReduce(x, ReduceOp::kSum);
  first->Wait();
  second->Wait();
  EXPECT_EQ(x.ToVector<double>(), std::vector<double>(4, pg.size()));
  EXPECT_EQ(y.ToVector<double>(), std::vector<double>(4, 2 * pg.size()));
  pg.Barrier()->Wait();
}

// Every rank receives from the previous one before it sends to the next: a ring of p2p queues each waiting
// for a send the previous rank will post only after its own receive. The monitors find the cycle through
// the store and every rank raises kAborted naming the receives, well before the 20 s timeout; so does the
// ring of blocking sends (a gloo send waits for its receive); the same ring posted as one batch per rank
// completes.
TEST(GlooTest, ReceivesThatWaitForEachOtherInARingRaiseADeadlockOnEveryProcess) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<int> all;
  for (int j = 0; j < pg.size(); ++j) all.push_back(j);
  ProcessGroupPtr ring = pg.NewGroup(all);  // fresh: the deadlock breaks it
  const int n = pg.size(), r = pg.rank(), prev = (r + n - 1) % n, next = (r + 1) % n;
  const auto start = Clock::now();
  ExpectErrorContains(
      [&] {
        ring->Recv(Zeros({2}), prev, 7)->Wait();
        ring->Send(Ones({2}), next, 7)->Wait();
      },
      ErrorCode::kAborted,
      {Str("deadlock: rank 0 waits in recv from rank ", n - 1, " (global ", n - 1, ", tag 7, 8 B) on group '",
           ring->name(), "'"),
       Str("rank 1 waits in recv from rank 0 (global 0, tag 7, 8 B)"), "which has not posted its side",
       "post each exchange as one batch_isend_irecv"});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  // Both directions as blocking sends first: a gloo send waits for its receive, so the two sends wait on
  // each other (2 ranks; with more, the ring of sends).
  ProcessGroupPtr sends = pg.NewGroup(all);
  ExpectErrorContains(
      [&] {
        sends->Send(Ones({2}), next, 9)->Wait();
        sends->Recv(Zeros({2}), prev, 9)->Wait();
      },
      ErrorCode::kAborted,
      {Str("deadlock: rank 0 waits in send to rank 1 (global 1, tag 9, 8 B) on group '", sends->name(), "'"),
       "which has not posted its side"});
  ProcessGroupPtr batched = pg.NewGroup(all);
  Tensor got = Zeros({2});
  batched->BatchP2P({{P2POp::Kind::kSend, Full({2}, r), next, 8}, {P2POp::Kind::kRecv, got, prev, 8}})->Wait();
  EXPECT_EQ(got.ToVector<double>(), std::vector<double>(2, prev));
  pg.Barrier()->Wait();
}

// A send whose receiver went on to a barrier of the group instead (a pipeline stage that ran one step more than
// its peer): the caller's wait for its send, its p2p queue, the peer's idle queue and the peer's thread in the
// barrier close the cycle, so both processes raise kAborted naming the send and the barrier within seconds.
TEST(GlooTest, ASendAgainstThePeersBarrierRaisesADeadlockOnEveryProcess) {
  ProcessGroup& pg = World();
  if (pg.size() != 2) GTEST_SKIP() << "needs 2 ranks";
  ProcessGroupPtr g = pg.NewGroup({0, 1});  // fresh: the deadlock breaks it
  const auto start = Clock::now();
  ExpectErrorContains(
      [&] {
        if (g->rank() == 0) {
          g->Send(Ones({2}), 1, 4)->Wait();
        } else {
          g->Barrier()->Wait();
        }
      },
      ErrorCode::kAborted,
      {"deadlock: rank 0 waits in send to rank 1 (global 1, tag 4, 8 B) on group '", "rank 1 waits in barrier #0",
       "a send or receive waits for a rank that is inside a collective"});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  pg.Barrier()->Wait();
}

TEST(GlooTest, EnvironmentErrorsNameTheVariable) {
  const std::string saved = std::getenv("MASTER_PORT");
  setenv("MASTER_PORT", "x", 1);
  int rank = 0, world = 0;
  ExpectErrorContains([&] { GlooOptionsFromEnv(&rank, &world); }, ErrorCode::kInvalidArgument,
              {"MASTER_PORT='x' is not an integer"});
  setenv("MASTER_PORT", saved.c_str(), 1);
  World().Barrier()->Wait();
}

// Last test of the file (gtest keeps definition order): the last rank's process exits with code 0
// in the middle of the job, and the others' next collective, a barrier, and a receive from it fail at
// once naming it instead of waiting out the 20 s timeout (gloo_test.sh gives the launcher a long --exit-grace-s).
TEST(GlooTest, PeerProcessThatExitedFailsTheNextBarrierAtOnceNamingIt) {
  ProcessGroup& pg = World();
  if (pg.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int last = pg.size() - 1;
  std::vector<int> all;
  for (int j = 0; j < pg.size(); ++j) all.push_back(j);
  ProcessGroupPtr p2p = pg.NewGroup(all);  // p2p gets a group of its own: the barrier's failure breaks the world
  ProcessGroupPtr spare = pg.NewGroup(all);  // and new_group after the death (a mesh built after a failure)
  pg.Barrier()->Wait();
  if (pg.rank() == last) std::_Exit(0);  // no destructor, no goodbye: like a crash after a clean step
  // new_group's agreement exchange names the dead rank at once (its store rendezvous waited the timeout).
  const auto group_start = Clock::now();
  ExpectErrorContains([&] { spare->NewGroup(all); }, ErrorCode::kAborted,
                      {"new_group #0 on group '", "agreement exchange failed",
                       Str("the connection to rank(s) ", last, " (global ", last, ") closed")});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - group_start).count(), 15.0);
  const auto start = Clock::now();
  ExpectErrorContains([&] { pg.Barrier()->Wait(); }, ErrorCode::kAborted,
                      {"barrier #", Str("the connection to rank(s) ", last, " (global ", last, ") closed")});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 15.0);  // the timeout is 20 s
  // Point to point too (the pipeline's sends and receives): a receive from the dead rank fails at once.
  const auto p2p_start = Clock::now();
  ExpectErrorContains([&] { p2p->Recv(Zeros({4}), last, 9)->Wait(); }, ErrorCode::kAborted,
                      {Str("recv from rank ", last, " (global ", last, ", tag 9, 16 B)"),
                       Str("the connection to rank ", last, " (global ", last, ") closed (the process exited or died)")});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - p2p_start).count(), 15.0);
}

}  // namespace
}  // namespace tessel::comm
