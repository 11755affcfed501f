// CommTracer records every call issued on its thread, nests, and ignores other threads (ranks).
#include "comm/tracer.h"

#include <gtest/gtest.h>

#include "comm/backends/threads.h"
#include "core/tensor/factory.h"

namespace tessel::comm {
namespace {

TEST(CommTracerTest, CountsEachCollectiveIssuedOnThisRankWithGroupAndBytes) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    ProcessGroupPtr sub = pg->NewGroup({0, 1});
    sub->set_name("tp");
    CommTracer outer;
    Tensor t = Zeros({8});
    pg->AllReduce(t, ReduceOp::kSum)->Wait();
    {
      CommTracer inner;
      sub->AllGather(Zeros({16}), t)->Wait();
      sub->AllGather(Zeros({16}, DType::kBFloat16), Zeros({8}, DType::kBFloat16))->Wait();
      EXPECT_EQ(inner.Total(), 2);
      EXPECT_EQ(inner.Count(CollectiveKind::kAllGather, "tp"), 2);
      EXPECT_EQ(inner.Bytes(CollectiveKind::kAllGather), 32 + 16);
      EXPECT_EQ(inner.records()[1].dtype, DType::kBFloat16);
    }
    pg->ReduceScatter(Zeros({4}), t, ReduceOp::kAvg)->Wait();
    if (pg->rank() == 0) {
      pg->Send(t, 1)->Wait();
    } else {
      pg->Recv(t, 0)->Wait();
    }
    pg->Barrier()->Wait();
    EXPECT_EQ(outer.Total(), 6);
    EXPECT_EQ(outer.Count(CollectiveKind::kAllReduce), 1);
    EXPECT_EQ(outer.Count(CollectiveKind::kAllGather), 2);
    EXPECT_EQ(outer.Count(CollectiveKind::kAllGather, "world"), 0);
    EXPECT_EQ(outer.Count(pg->rank() == 0 ? CollectiveKind::kSend : CollectiveKind::kRecv), 1);
    EXPECT_EQ(outer.Bytes(CollectiveKind::kAllReduce), 32);
    const std::string p2p = pg->rank() == 0 ? "send(world) x1" : "recv(world) x1";
    EXPECT_EQ(outer.Summary(),
              "all_reduce(world) x1, all_gather(tp) x2, reduce_scatter(world) x1, " + p2p + ", barrier(world) x1");
    outer.Clear();
    EXPECT_EQ(outer.Total(), 0);
  });
}

TEST(CommTracerTest, RingBytesCountAnAllReduceAsAnAllGatherPlusAReduceScatter) {
  RunRanks(4, [](ProcessGroupPtr pg) {
    Tensor full = Zeros({16}), piece = Zeros({4});  // 64 B and 16 B
    double all_reduce_bytes = 0;
    {
      CommTracer all_reduce;
      pg->AllReduce(full, ReduceOp::kSum)->Wait();
      all_reduce_bytes = all_reduce.RingBytes(4);
    }
    EXPECT_DOUBLE_EQ(all_reduce_bytes, 2.0 * 3 / 4 * 64);  // 96
    CommTracer pair;
    pg->ReduceScatter(piece, full, ReduceOp::kSum)->Wait();  // 3/4 * 64 = 48
    pg->AllGather(full, piece)->Wait();                        // 3 * 16 = 48
    EXPECT_DOUBLE_EQ(pair.RingBytes(4), all_reduce_bytes);
    // Per group: only the named group's collectives count.
    auto low = pg->NewGroup({0, 1}), high = pg->NewGroup({2, 3});  // every rank makes both, in order
    const std::shared_ptr<ProcessGroup>& half = low ? low : high;
    half->set_name("half");
    CommTracer mixed;
    pg->AllReduce(full, ReduceOp::kSum)->Wait();   // world: 2 * 3/4 * 64 = 96
    half->AllReduce(full, ReduceOp::kSum)->Wait();  // half: 2 * 1/2 * 64 = 64
    EXPECT_DOUBLE_EQ(mixed.RingBytes(2, "half"), 64.0);
    EXPECT_DOUBLE_EQ(mixed.RingBytes(4, pg->name()), 96.0);
    EXPECT_DOUBLE_EQ(mixed.RingBytes(2, "no such group"), 0.0);
  });
}

TEST(CommTracerTest, RecordsAtIssueTimeBeforeTheCollectiveCompletes) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    CommTracer tracer;
    WorkPtr w = pg->AllReduce(Zeros({2}), ReduceOp::kMax);
    EXPECT_EQ(tracer.Count(CollectiveKind::kAllReduce), 1);
    w->Wait();
  });
}

TEST(CommTracerTest, NamesEveryKind) {
  EXPECT_EQ(CollectiveKindName(CollectiveKind::kAllToAll), "all_to_all");
  EXPECT_EQ(CollectiveKindName(CollectiveKind::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(ReduceOpName(ReduceOp::kProduct), "product");
}

}  // namespace
}  // namespace tessel::comm
