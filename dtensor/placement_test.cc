#include "dtensor/placement.h"

#include <gtest/gtest.h>

#include <unordered_set>

#include "core/base/error.h"
#include "dtensor/shard_order.h"

namespace tessel::dtensor {
namespace {

using comm::ReduceOp;

TEST(PlacementTest, ShardEqualsShardOnSameTensorDim) {
  EXPECT_EQ(Placement(Shard{0}), Placement(Shard{0}));
  EXPECT_NE(Placement(Shard{0}), Placement(Shard{1}));
  EXPECT_NE(Placement(Shard{0}), Placement(Replicate{}));
  EXPECT_EQ(Placement(Replicate{}), Placement(Replicate{}));
  EXPECT_EQ(Placement(Partial{}), Placement(Partial{ReduceOp::kSum}));
  EXPECT_NE(Placement(Partial{ReduceOp::kSum}), Placement(Partial{ReduceOp::kMax}));
}

TEST(PlacementTest, HashAgreesWithEqualityAndSeparatesKinds) {
  std::unordered_set<Placement> set = {Shard{0}, Shard{1}, Replicate{}, Partial{ReduceOp::kSum},
                                       Partial{ReduceOp::kAvg}, Partial{ReduceOp::kMax}, Partial{ReduceOp::kMin}};
  EXPECT_EQ(set.size(), 7u);
  EXPECT_TRUE(set.count(Shard{1}));
  EXPECT_TRUE(set.count(Partial{ReduceOp::kAvg}));
  EXPECT_EQ(std::hash<Placement>()(Shard{3}), std::hash<Placement>()(Shard{3}));
}

TEST(PlacementTest, ShortAndLongStringsFollowPyTorch) {
  EXPECT_EQ(ToString(Shard{0}), "S(0)");
  EXPECT_EQ(ToString(Replicate{}), "R");
  EXPECT_EQ(ToString(Partial{}), "P(sum)");
  EXPECT_EQ(ToString(Partial{ReduceOp::kAvg}), "P(avg)");
  EXPECT_EQ(ToLongString(Shard{2}), "Shard(dim=2)");
  EXPECT_EQ(ToLongString(Replicate{}), "Replicate()");
  EXPECT_EQ(ToLongString(Partial{ReduceOp::kMin}), "Partial(min)");
  std::vector<Placement> p = {Shard{1}, Replicate{}, Partial{ReduceOp::kMax}};
  EXPECT_EQ(PlacementsToString(p), "[S(1), R, P(max)]");
  std::ostringstream os;
  os << p[0] << " " << Shard{4};
  EXPECT_EQ(os.str(), "S(1) S(4)");
}

TEST(PlacementTest, ParseAcceptsShortAndLongForms) {
  std::vector<Placement> want = {Shard{0}, Replicate{}, Partial{ReduceOp::kAvg}, Partial{}, Shard{12}};
  EXPECT_EQ(ParsePlacements("S(0), R, P(avg), P, S(12)"), want);
  EXPECT_EQ(ParsePlacements("Shard(dim=0) Replicate() Partial(avg) Partial() Shard(12)"), want);
  EXPECT_EQ(ParsePlacements(""), std::vector<Placement>{});
  EXPECT_EQ(ParsePlacements("S(-1)"), std::vector<Placement>{Shard{-1}});
}

TEST(PlacementTest, ParseRejectsGarbageNamingTheToken) {
  for (const char* bad : {"X", "S()", "S(a)", "P(mean)", "R(1)", "S(0"}) {
    SCOPED_TRACE(bad);
    try {
      ParsePlacements(std::string("R, ") + bad);
      FAIL() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("cannot parse"), std::string::npos) << e.what();
    }
  }
}

TEST(PlacementTest, PartialSupportsSumAvgMaxMinOnly) {
  EXPECT_TRUE(IsSupportedPartialOp(ReduceOp::kSum));
  EXPECT_TRUE(IsSupportedPartialOp(ReduceOp::kAvg));
  EXPECT_TRUE(IsSupportedPartialOp(ReduceOp::kMax));
  EXPECT_TRUE(IsSupportedPartialOp(ReduceOp::kMin));
  EXPECT_FALSE(IsSupportedPartialOp(ReduceOp::kProduct));
}

TEST(PlacementTest, KindPredicates) {
  EXPECT_TRUE(IsShard(Shard{1}));
  EXPECT_TRUE(IsShardOn(Shard{1}, 1));
  EXPECT_FALSE(IsShardOn(Shard{1}, 0));
  EXPECT_FALSE(IsShardOn(Replicate{}, 0));
  EXPECT_TRUE(IsReplicate(Replicate{}));
  EXPECT_TRUE(IsPartial(Partial{}));
  EXPECT_FALSE(IsPartial(Shard{0}));
}

// Note (e): the Replicate <-> Partial duality, one row per (grad, forward source) kind.
TEST(PlacementTest, GradPlacementTurnsPartialSourceIntoReplicate) {
  struct Row {
    Placement grad, src, want;
  };
  const Row rows[] = {
      {Replicate{}, Partial{}, Replicate{}},          // P -> R forward: backward keeps R (no comm)
      {Shard{0}, Partial{}, Replicate{}},             // P -> S forward: backward all_gathers to R
      {Partial{}, Partial{}, Partial{}},              // P stays P
      {Replicate{}, Shard{1}, Shard{1}},              // S -> R forward: backward chunks locally
      {Shard{0}, Replicate{}, Replicate{}},           // R -> S forward: backward all_gathers
      {Partial{}, Replicate{}, Replicate{}},          // R -> P forward: backward all_reduces
      {Shard{1}, Shard{0}, Shard{0}},                 // S(0) -> S(1) forward: backward all_to_all
      {Replicate{}, Partial{ReduceOp::kAvg}, Replicate{}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(ToString(r.grad) + " grad of source " + ToString(r.src));
    EXPECT_EQ(GradPlacement(r.grad, r.src), r.want);
  }
}

TEST(ShardOrderTest, DefaultOrderListsAxesOuterFirst) {
  std::vector<Placement> p = ParsePlacements("S(1), R, S(1), S(0)");
  ShardOrder want = {{3}, {0, 2}, {}};
  EXPECT_EQ(DefaultShardOrder(p, 3), want);
  EXPECT_TRUE(IsDefaultShardOrder(want));
  EXPECT_FALSE(IsDefaultShardOrder(ShardOrder{{}, {2, 0}, {}}));
  EXPECT_EQ(ShardOrderToString(want), "{0: [3], 1: [0, 2]}");
  EXPECT_EQ(ShardOrderToString(ShardOrder{{}, {}}), "{}");
}

TEST(ShardOrderTest, StridedShardSplitFactorsMatchPyTorchExamples) {
  // _StridedShard docstring: mesh (dp, tp) = (2, 2), TP first then FSDP -> [_StridedShard(0, sf=2), Shard(0)].
  EXPECT_EQ(StridedShardSplitFactors(ShardOrder{{1, 0}, {}}, std::vector<int64_t>{2, 2}),
            (std::vector<int64_t>{2, 1}));
  // _convert_shard_order_to_StridedShard docstring: mesh (4, 3, 2), dim 0 ordered [2, 0, 1] -> sf (2, 2, 1).
  EXPECT_EQ(StridedShardSplitFactors(ShardOrder{{2, 0, 1}}, std::vector<int64_t>{4, 3, 2}),
            (std::vector<int64_t>{2, 2, 1}));
  // The default order never needs a strided shard.
  EXPECT_EQ(StridedShardSplitFactors(ShardOrder{{0, 1, 2}}, std::vector<int64_t>{4, 3, 2}),
            (std::vector<int64_t>{1, 1, 1}));
}

}  // namespace
}  // namespace tessel::dtensor
