#include "dtensor/mesh_topology.h"

#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/base/testing/expect_error.h"

namespace tessel::dtensor {
namespace {

// (code, fragment, fn): the long lambda last. The check itself is core/base/testing/expect_error.h.
void ExpectError(ErrorCode code, const std::string& fragment, const std::function<void()>& fn) {
  ::tessel::testing::ExpectErrorContains(fn, code, fragment);
}

TEST(MeshTopologyTest, ToStringGoldens) {
  EXPECT_EQ(MeshTopology::Iota({2, 2}, {"dp", "tp"}).ToString(),
            "DeviceMesh(shape=[2, 2], axes=[dp, tp], ranks=[[0, 1], [2, 3]])");
  EXPECT_EQ(MeshTopology::Iota({4}, {"x"}).ToString(), "DeviceMesh(shape=[4], axes=[x], ranks=[0, 1, 2, 3])");
  EXPECT_EQ(MeshTopology::Iota({2, 1, 2}, {"pp", "dp", "tp"}).ToString(),
            "DeviceMesh(shape=[2, 1, 2], axes=[pp, dp, tp], ranks=[[[0, 1]], [[2, 3]]])");
  EXPECT_EQ(MeshTopology::Iota({3, 2}).ToString(),
            "DeviceMesh(shape=[3, 2], axes=[axis0, axis1], ranks=[[0, 1], [2, 3], [4, 5]])");
  EXPECT_EQ(MeshTopology::Iota({3, 2}, {"dp", "tp"}).ShortString(), "(dp=3, tp=2)");
}

TEST(MeshTopologyTest, CoordinatesAreRowMajorOverTheRankList) {
  MeshTopology t({2, 3}, {"dp", "tp"}, {10, 11, 12, 20, 21, 22});
  EXPECT_EQ(t.CoordinateOf(21), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(t.CoordinateOf(12), (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(t.CoordinateOf(3).has_value());
  EXPECT_EQ(t.RankAt(std::vector<int64_t>{1, 2}), 22);
  for (int r : t.ranks()) EXPECT_EQ(t.RankAt(*t.CoordinateOf(r)), r);
}

TEST(MeshTopologyTest, AxisGroupsVaryOneCoordinate) {
  MeshTopology t = MeshTopology::Iota({2, 3}, {"dp", "tp"});
  EXPECT_EQ(t.AxisGroupRanks(1, std::vector<int64_t>{1, 0}), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(t.AxisGroupRanks(0, std::vector<int64_t>{1, 2}), (std::vector<int>{2, 5}));
  const std::vector<int> dp = {0}, tp = {1}, both = {0, 1};
  EXPECT_EQ(t.GroupsOver(dp), (std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(t.GroupsOver(tp), (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(t.GroupsOver(both), (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5}}));
}

TEST(MeshTopologyTest, GroupsOverThreeAxesEnumerateOtherAxesRowMajor) {
  MeshTopology t = MeshTopology::Iota({2, 2, 2}, {"pp", "dp", "tp"});
  const std::vector<int> pp_tp = {0, 2};
  EXPECT_EQ(t.GroupsOver(pp_tp), (std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  const std::vector<int> dp = {1};
  EXPECT_EQ(t.GroupsOver(dp), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(MeshTopologyTest, SliceKeepsTheSubMeshThatContainsTheCoordinate) {
  MeshTopology t = MeshTopology::Iota({2, 2, 2}, {"pp", "dp", "tp"});
  const std::vector<int64_t> coord = {1, 0, 1};  // rank 5
  const std::vector<int> tp = {2}, pp_tp = {0, 2};
  EXPECT_EQ(t.Slice(tp, coord).ToString(), "DeviceMesh(shape=[2], axes=[tp], ranks=[4, 5])");
  EXPECT_EQ(t.Slice(pp_tp, coord).ToString(), "DeviceMesh(shape=[2, 2], axes=[pp, tp], ranks=[[0, 1], [4, 5]])");
  EXPECT_EQ(t.Flatten(pp_tp, coord, "pp_tp").ToString(), "DeviceMesh(shape=[4], axes=[pp_tp], ranks=[0, 1, 4, 5])");
  const std::vector<std::string> names = {"pp", "tp"};
  EXPECT_EQ(t.AxesOf(names), pp_tp);
}

TEST(MeshTopologyTest, EqualityComparesShapeNamesAndRanks) {
  MeshTopology a = MeshTopology::Iota({2, 2}, {"dp", "tp"});
  EXPECT_EQ(a, MeshTopology::Iota({2, 2}, {"dp", "tp"}));
  EXPECT_EQ(a.Hash(), MeshTopology::Iota({2, 2}, {"dp", "tp"}).Hash());
  EXPECT_FALSE(a == MeshTopology::Iota({2, 2}, {"dp", "cp"}));
  EXPECT_FALSE(a == MeshTopology::Iota({4}, {"dp"}));
  EXPECT_FALSE(a == MeshTopology({2, 2}, {"dp", "tp"}, {0, 2, 1, 3}));
}

TEST(MeshTopologyTest, BadMeshesRaiseInvalidArgument) {
  ExpectError(ErrorCode::kInvalidArgument, "duplicate axis name 'dp'",
              [] { MeshTopology::Iota({2, 2}, {"dp", "dp"}); });
  ExpectError(ErrorCode::kInvalidArgument, "holds 4 ranks but 3 ranks were given",
              [] { MeshTopology({2, 2}, {"dp", "tp"}, {0, 1, 2}); });
  ExpectError(ErrorCode::kInvalidArgument, "rank 1 appears twice",
              [] { MeshTopology({2}, {"dp"}, {1, 1}); });
  ExpectError(ErrorCode::kInvalidArgument, "size 0", [] { MeshTopology::Iota({2, 0}, {"dp", "tp"}); });
  ExpectError(ErrorCode::kInvalidArgument, "at least one axis", [] { MeshTopology::Iota({}, {}); });
  ExpectError(ErrorCode::kInvalidArgument, "1 axis names for 2 axes", [] { MeshTopology::Iota({2, 2}, {"dp"}); });
}

TEST(MeshTopologyTest, UnknownOrUnorderedAxesRaiseNamingTheMesh) {
  MeshTopology t = MeshTopology::Iota({2, 2}, {"dp", "tp"});
  ExpectError(ErrorCode::kInvalidArgument, "unknown axis 'pp'; the mesh has axes [dp, tp]",
              [&] { t.AxisIndex("pp"); });
  const std::vector<std::string> reversed = {"tp", "dp"};
  ExpectError(ErrorCode::kInvalidArgument, "must be distinct and in mesh order", [&] { t.AxesOf(reversed); });
  ExpectError(ErrorCode::kOutOfRange, "out of range", [&] { t.RankAt(std::vector<int64_t>{2, 0}); });
  ExpectError(ErrorCode::kOutOfRange, "axis 2 out of range", [&] { t.size(2); });
}

}  // namespace
}  // namespace tessel::dtensor
