#include "dtensor/debug/visualize_sharding.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

std::shared_ptr<const MeshTopology> Mesh(std::vector<int64_t> shape, std::vector<std::string> names) {
  return std::make_shared<const MeshTopology>(MeshTopology::Iota(std::move(shape), std::move(names)));
}

TEST(VisualizeShardingTest, TwoDimMeshRowsShardedGolden) {
  DTensorSpec spec(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("S(0), R"), {5, 3}, DType::kFloat32);
  EXPECT_EQ(VisualizeSharding(spec),
            "DTensor [5, 3] float32, placements [S(0), R], mesh (dp=2, tp=2)\n"
            "rank  coordinate  dim 0   dim 1   value\n"
            "0     (0, 0)      [0, 3)  [0, 3)  full\n"
            "1     (0, 1)      [0, 3)  [0, 3)  full\n"
            "2     (1, 0)      [3, 5)  [0, 3)  full\n"
            "3     (1, 1)      [3, 5)  [0, 3)  full\n"
            "blocks:\n"
            "  [0, 3) x [0, 3): ranks 0, 1\n"
            "  [3, 5) x [0, 3): ranks 2, 3\n");
}

TEST(VisualizeShardingTest, UnevenShardsShowEmptyPiecesGolden) {
  DTensorSpec spec(Mesh({4}, {"x"}), ParsePlacements("S(0)"), {5}, DType::kFloat64);
  EXPECT_EQ(VisualizeSharding(spec),
            "DTensor [5] float64, placements [S(0)], mesh (x=4)\n"
            "rank  coordinate  dim 0   value\n"
            "0     (0)         [0, 2)  full\n"
            "1     (1)         [2, 4)  full\n"
            "2     (2)         [4, 5)  full\n"
            "3     (3)         empty   full\n"
            "blocks:\n"
            "  [0, 2): rank 0\n"
            "  [2, 4): rank 1\n"
            "  [4, 5): rank 2\n"
            "  empty: rank 3\n");
}

TEST(VisualizeShardingTest, PartialAndExplicitShardOrderGolden) {
  DTensorSpec spec(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("S(0), S(0)"), {8, 2}, DType::kFloat32,
                   ShardOrder{{1, 0}, {}});
  EXPECT_EQ(VisualizeSharding(spec),
            "DTensor [8, 2] float32, placements [S(0), S(0)], shard order {0: [1, 0]}, mesh (dp=2, tp=2)\n"
            "rank  coordinate  dim 0   dim 1   value\n"
            "0     (0, 0)      [0, 2)  [0, 2)  full\n"
            "1     (0, 1)      [4, 6)  [0, 2)  full\n"
            "2     (1, 0)      [2, 4)  [0, 2)  full\n"
            "3     (1, 1)      [6, 8)  [0, 2)  full\n"
            "blocks:\n"
            "  [0, 2) x [0, 2): rank 0\n"
            "  [4, 6) x [0, 2): rank 1\n"
            "  [2, 4) x [0, 2): rank 2\n"
            "  [6, 8) x [0, 2): rank 3\n");
  DTensorSpec partial(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("P(sum), S(1)"), {2, 3}, DType::kFloat32);
  EXPECT_EQ(VisualizeSharding(partial),
            "DTensor [2, 3] float32, placements [P(sum), S(1)], mesh (dp=2, tp=2)\n"
            "rank  coordinate  dim 0   dim 1   value\n"
            "0     (0, 0)      [0, 2)  [0, 2)  partial(sum) over dp\n"
            "1     (0, 1)      [0, 2)  [2, 3)  partial(sum) over dp\n"
            "2     (1, 0)      [0, 2)  [0, 2)  partial(sum) over dp\n"
            "3     (1, 1)      [0, 2)  [2, 3)  partial(sum) over dp\n"
            "blocks:\n"
            "  [0, 2) x [0, 2): ranks 0, 2\n"
            "  [0, 2) x [2, 3): ranks 1, 3\n");
}

TEST(VisualizeShardingTest, ADTensorPrintsItsSpecOnEveryRank) {
  testing::OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor d = DistributeTensor(testing::Values({3}), mesh, ParsePlacements("S(0)"));
    EXPECT_EQ(VisualizeSharding(d), VisualizeSharding(d.spec()));
    EXPECT_NE(VisualizeSharding(d).find("1     (1)         [2, 3)  full"), std::string::npos);
  });
}

}  // namespace
}  // namespace tessel::dtensor
