#include "dtensor/dtensor_spec.h"

#include <gtest/gtest.h>

#include <functional>
#include <unordered_set>

#include "core/base/error.h"

namespace tessel::dtensor {
namespace {

std::shared_ptr<const MeshTopology> Mesh(std::vector<int64_t> shape, std::vector<std::string> names) {
  return std::make_shared<const MeshTopology>(MeshTopology::Iota(std::move(shape), std::move(names)));
}

void ExpectInvalid(const std::vector<std::string>& fragments, const std::function<void()>& fn) {
  try {
    fn();
    ADD_FAILURE() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "missing '" << f << "' in: " << e.what();
    }
  }
}

TEST(DTensorSpecTest, ToStringGoldens) {
  auto mesh = Mesh({2, 2}, {"dp", "tp"});
  DTensorSpec a(mesh, ParsePlacements("S(0), R"), {8, 8}, DType::kFloat32);
  EXPECT_EQ(a.ToString(), "DTensorSpec(mesh=(dp=2, tp=2), placements=[S(0), R], shape=[8, 8], dtype=float32)");
  DTensorSpec b(mesh, ParsePlacements("S(0), S(0)"), {8, 8}, DType::kBFloat16, ShardOrder{{1, 0}, {}});
  EXPECT_EQ(b.ToString(),
            "DTensorSpec(mesh=(dp=2, tp=2), placements=[S(0), S(0)], order={0: [1, 0]}, shape=[8, 8], "
            "dtype=bfloat16)");
  DTensorSpec c(mesh, ParsePlacements("P(avg), S(1)"), {4, 6}, {1, 4}, DType::kFloat64);
  EXPECT_EQ(c.ToString(),
            "DTensorSpec(mesh=(dp=2, tp=2), placements=[P(avg), S(1)], shape=[4, 6], strides=[1, 4], "
            "dtype=float64)");
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), a.ToString());
}

TEST(DTensorSpecTest, DefaultOrderIsMeshAxisOrder) {
  DTensorSpec s(Mesh({2, 3, 2}, {"a", "b", "c"}), ParsePlacements("S(1), S(0), S(1)"), {6, 6}, DType::kFloat32);
  EXPECT_EQ(s.shard_order(), (ShardOrder{{1}, {0, 2}}));
  EXPECT_EQ(s.num_shards(0), 3);
  EXPECT_EQ(s.num_shards(1), 4);
  EXPECT_EQ(s.strides(), (Shape{6, 1}));
  EXPECT_FALSE(s.has_partial());
  EXPECT_FALSE(s.is_replicated());
}

TEST(DTensorSpecTest, EqualityAndHashCoverEveryField) {
  auto mesh = Mesh({2, 2}, {"dp", "tp"});
  DTensorSpec base(mesh, ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat32);
  std::vector<DTensorSpec> others = {
      DTensorSpec(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat32),  // equal
      DTensorSpec(mesh, ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat32, ShardOrder{{1, 0}, {}}),
      DTensorSpec(mesh, ParsePlacements("S(0), R"), {8, 8}, DType::kFloat32),
      DTensorSpec(mesh, ParsePlacements("S(0), S(0)"), {8, 9}, DType::kFloat32),
      DTensorSpec(mesh, ParsePlacements("S(0), S(0)"), {8, 8}, {1, 8}, DType::kFloat32),
      DTensorSpec(mesh, ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat64),
      DTensorSpec(Mesh({2, 2}, {"dp", "cp"}), ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat32),
  };
  EXPECT_EQ(base, others[0]);
  EXPECT_EQ(base.Hash(), others[0].Hash());
  std::unordered_set<DTensorSpec> set;
  for (const DTensorSpec& s : others) set.insert(s);
  EXPECT_EQ(set.size(), others.size());
  for (size_t i = 1; i < others.size(); ++i) {
    SCOPED_TRACE(others[i].ToString());
    EXPECT_FALSE(base == others[i]);
  }
  EXPECT_EQ(base.WithPlacements(ParsePlacements("S(0), R")), others[2]);
}

TEST(DTensorSpecTest, ShardDimBeyondNdimNamesPlacementsMeshAndShape) {
  ExpectInvalid({"S(2) on axis 'tp' needs 0 <= dim < ndim = 2", "[R, S(2)]", "(dp=2, tp=2)", "[4, 4]"}, [] {
    DTensorSpec(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("R, S(2)"), {4, 4}, DType::kFloat32);
  });
  ExpectInvalid({"S(-1)"}, [] { DTensorSpec(Mesh({2}, {"x"}), ParsePlacements("S(-1)"), {4}, DType::kFloat32); });
}

TEST(DTensorSpecTest, PlacementCountMustMatchMeshNdim) {
  ExpectInvalid({"1 placements for a 2-d mesh", "one placement per mesh axis"}, [] {
    DTensorSpec(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("S(0)"), {4, 4}, DType::kFloat32);
  });
}

TEST(DTensorSpecTest, PartialProductIsRejected) {
  ExpectInvalid({"P(product) is not supported"}, [] {
    DTensorSpec(Mesh({2}, {"x"}), {Partial{comm::ReduceOp::kProduct}}, {4}, DType::kFloat32);
  });
}

TEST(DTensorSpecTest, ShardOrderMustListEachShardAxisOnce) {
  auto mesh = Mesh({2, 2}, {"dp", "tp"});
  auto p = ParsePlacements("S(0), S(0)");
  ExpectInvalid({"lists axis 1 0 times"}, [&] { DTensorSpec(mesh, p, {8, 8}, DType::kFloat32, ShardOrder{{0}, {}}); });
  ExpectInvalid({"lists axis 1 for dim 1 but that axis is not Shard(1)"},
                [&] { DTensorSpec(mesh, p, {8, 8}, DType::kFloat32, ShardOrder{{0}, {1}}); });
  ExpectInvalid({"lists axis 0 2 times"},
                [&] { DTensorSpec(mesh, p, {8, 8}, DType::kFloat32, ShardOrder{{0, 1, 0}, {}}); });
  ExpectInvalid({"expected one per tensor dim (2)"},
                [&] { DTensorSpec(mesh, p, {8, 8}, DType::kFloat32, ShardOrder{{0, 1}}); });
  ExpectInvalid({"lists axis 5"}, [&] { DTensorSpec(mesh, p, {8, 8}, DType::kFloat32, ShardOrder{{0, 1, 5}, {}}); });
}

TEST(DTensorSpecTest, StridesMustMatchShape) {
  ExpectInvalid({"strides [1] for shape [4, 4]"}, [] {
    DTensorSpec(Mesh({2}, {"x"}), ParsePlacements("R"), {4, 4}, {1}, DType::kFloat32);
  });
}

}  // namespace
}  // namespace tessel::dtensor
