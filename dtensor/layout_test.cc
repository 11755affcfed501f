#include "dtensor/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/base/error.h"

namespace tessel::dtensor {
namespace {

std::shared_ptr<const MeshTopology> Mesh(std::vector<int64_t> shape, std::vector<std::string> names = {}) {
  return std::make_shared<const MeshTopology>(MeshTopology::Iota(std::move(shape), std::move(names)));
}

// Reference: the global indices a coordinate holds along one dim, by splitting index lists the way
// torch.chunk does (PyTorch's shard_dim_to_global_offsets); an independent formulation of DimExtent.
std::vector<int64_t> ReferenceIndices(int64_t n, const std::vector<int>& axes, const std::vector<int64_t>& mesh,
                                      const std::vector<int64_t>& coord) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  for (int a : axes) {
    const int64_t w = mesh[static_cast<size_t>(a)];
    const int64_t len = static_cast<int64_t>(idx.size());
    const int64_t chunk = len == 0 ? 0 : (len + w - 1) / w;
    std::vector<int64_t> piece;
    for (int64_t i = chunk * coord[static_cast<size_t>(a)]; i < std::min(len, chunk * (coord[static_cast<size_t>(a)] + 1));
         ++i) {
      piece.push_back(idx[static_cast<size_t>(i)]);
    }
    idx = piece;
  }
  return idx;
}

TEST(LayoutTest, ChunkPiecesFollowTorchChunk) {
  struct Row {
    int64_t n, w;
    std::vector<int64_t> sizes, offsets;
  };
  const Row rows[] = {
      {8, 4, {2, 2, 2, 2}, {0, 2, 4, 6}}, {7, 4, {2, 2, 2, 1}, {0, 2, 4, 6}}, {6, 4, {2, 2, 2, 0}, {0, 2, 4, 6}},
      {5, 4, {2, 2, 1, 0}, {0, 2, 4, 5}}, {9, 4, {3, 3, 3, 0}, {0, 3, 6, 9}}, {1, 4, {1, 0, 0, 0}, {0, 1, 1, 1}},
      {0, 4, {0, 0, 0, 0}, {0, 0, 0, 0}}, {3, 1, {3}, {0}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(Str("n=", r.n, " W=", r.w));
    for (int64_t i = 0; i < r.w; ++i) {
      const ChunkPiece p = ChunkPieceOf(r.n, r.w, i);
      EXPECT_EQ(p.size, r.sizes[static_cast<size_t>(i)]);
      EXPECT_EQ(p.offset, r.offsets[static_cast<size_t>(i)]);
      // 1-D global layout agrees (empty piece offset = n).
      const LocalLayout l = ComputeLocalShapeAndGlobalOffset(std::vector<int64_t>{r.n}, std::vector<int64_t>{r.w},
                                                             ParsePlacements("S(0)"), std::vector<int64_t>{i});
      EXPECT_EQ(l.local_shape, (Shape{r.sizes[static_cast<size_t>(i)]}));
      EXPECT_EQ(l.global_offset, (Shape{r.offsets[static_cast<size_t>(i)]}));
    }
  }
}

TEST(LayoutTest, NestedShardingChunksOuterAxisFirst) {
  // mesh (3, 2), [S(0), S(0)], arange(8): rank locals [0,1], [2], [3,4], [5], [6], [7].
  const std::vector<Shape> want_shape = {{2}, {1}, {2}, {1}, {1}, {1}};
  const std::vector<Shape> want_offset = {{0}, {2}, {3}, {5}, {6}, {7}};
  DTensorSpec spec(Mesh({3, 2}), ParsePlacements("S(0), S(0)"), {8}, DType::kFloat32);
  const std::vector<RankRegion> regions = AllRankRegions(spec);
  ASSERT_EQ(regions.size(), 6u);
  for (size_t r = 0; r < 6; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(regions[r].rank, static_cast<int>(r));
    const LocalLayout l = ComputeLocalShapeAndGlobalOffset(spec.shape(), spec.mesh().shape(), spec.placements(),
                                                           regions[r].coordinate);
    EXPECT_EQ(l.local_shape, want_shape[r]);
    EXPECT_EQ(l.global_offset, want_offset[r]);
  }
}

TEST(LayoutTest, TensorParallelThenFsdpOrderMatchesTheIssueTable) {
  // mesh (dp, tp) = (2, 2), [8, 8], TP Shard(0) then FSDP Shard(0).
  DTensorSpec spec(Mesh({2, 2}, {"dp", "tp"}), ParsePlacements("S(0), S(0)"), {8, 8}, DType::kFloat32,
                   ShardOrder{{1, 0}, {}});
  const std::vector<int64_t> first_row = {0, 4, 2, 6};
  for (const RankRegion& r : AllRankRegions(spec)) {
    SCOPED_TRACE(r.rank);
    EXPECT_EQ(r.intervals, (std::vector<DimInterval>{{first_row[static_cast<size_t>(r.rank)], 2}, {0, 8}}));
  }
  // Uneven: 5 rows. TP pieces rows 0-2 / 3-4, then FSDP halves of each.
  DTensorSpec uneven(spec.mesh_ptr(), spec.placements(), {5, 8}, DType::kFloat32, spec.shard_order());
  const std::vector<DimInterval> rows = {{0, 2}, {3, 1}, {2, 1}, {4, 1}};
  for (const RankRegion& r : AllRankRegions(uneven)) {
    SCOPED_TRACE(r.rank);
    EXPECT_EQ(r.intervals[0], rows[static_cast<size_t>(r.rank)]);
  }
}

TEST(LayoutTest, PyTorchDocstringExamples) {
  // compute_local_shape_and_global_offset docstring: [2, 5] on (DP=2, TP=2) with (Shard(1), Shard(1)).
  DTensorSpec a(Mesh({2, 2}), ParsePlacements("S(1), S(1)"), {2, 5}, DType::kFloat32);
  const std::vector<Shape> shapes = {{2, 2}, {2, 1}, {2, 1}, {2, 1}};
  const std::vector<Shape> offsets = {{0, 0}, {0, 2}, {0, 3}, {0, 4}};
  for (const RankRegion& r : AllRankRegions(a)) {
    const LocalLayout l = ComputeLocalShapeAndGlobalOffset(a, r.coordinate);
    EXPECT_EQ(l.local_shape, shapes[static_cast<size_t>(r.rank)]);
    EXPECT_EQ(l.global_offset, offsets[static_cast<size_t>(r.rank)]);
  }
  // Older docstring: [8, 4] on mesh (2, 4) with [S(0), S(0)] gives rank r row r.
  DTensorSpec b(Mesh({2, 4}), ParsePlacements("S(0), S(0)"), {8, 4}, DType::kFloat32);
  for (const RankRegion& r : AllRankRegions(b)) {
    EXPECT_EQ(ComputeLocalShapeAndGlobalOffset(b, r.coordinate).global_offset, (Shape{r.rank, 0}));
    EXPECT_EQ(ComputeLocalShape(b, r.coordinate), (Shape{1, 4}));
  }
}

TEST(LayoutTest, ReplicateAndPartialKeepTheWholeDim) {
  const LocalLayout l = ComputeLocalShapeAndGlobalOffset(std::vector<int64_t>{6, 5}, std::vector<int64_t>{2, 2},
                                                         ParsePlacements("R, P(sum)"), std::vector<int64_t>{1, 1});
  EXPECT_EQ(l.local_shape, (Shape{6, 5}));
  EXPECT_EQ(l.global_offset, (Shape{0, 0}));
}

TEST(LayoutTest, SizeOneAxisShardHoldsEverything) {
  DTensorSpec s(Mesh({1, 4}), ParsePlacements("S(0), S(0)"), {6}, DType::kFloat32);
  EXPECT_EQ(GlobalIntervals(s, std::vector<int64_t>{0, 3}), (std::vector<DimInterval>{{6, 0}}));
  EXPECT_EQ(GlobalIntervals(s, std::vector<int64_t>{0, 2}), (std::vector<DimInterval>{{4, 2}}));
}

TEST(LayoutTest, BadShardDimRaisesNamingPlacements) {
  try {
    ComputeLocalShapeAndGlobalOffset(std::vector<int64_t>{4}, std::vector<int64_t>{2}, ParsePlacements("S(1)"),
                                     std::vector<int64_t>{0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("S(1) on a tensor of shape [4]"), std::string::npos) << e.what();
  }
}

// Random meshes (1-D..3-D), shapes with sizes 0, 1 and non-divisible ones, random placements and random
// shard orders: every coordinate's box equals the reference index list, and the boxes of the ranks that
// differ only on shard axes tile the tensor exactly once.
TEST(LayoutTest, RandomLayoutsMatchReferenceAndTileTheTensor) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 400; ++trial) {
    const int mesh_ndim = 1 + static_cast<int>(rng() % 3);
    std::vector<int64_t> mesh_shape;
    for (int a = 0; a < mesh_ndim; ++a) mesh_shape.push_back(1 + static_cast<int64_t>(rng() % 3));
    const int ndim = 1 + static_cast<int>(rng() % 3);
    Shape shape;
    for (int d = 0; d < ndim; ++d) shape.push_back(static_cast<int64_t>(rng() % 8));
    std::vector<Placement> placements;
    for (int a = 0; a < mesh_ndim; ++a) {
      const int k = static_cast<int>(rng() % (ndim + 2));
      placements.push_back(k < ndim ? Placement(Shard{k}) : k == ndim ? Placement(Replicate{}) : Placement(Partial{}));
    }
    ShardOrder order = DefaultShardOrder(placements, ndim);
    for (std::vector<int>& axes : order) std::shuffle(axes.begin(), axes.end(), rng);
    DTensorSpec spec(Mesh(mesh_shape), placements, shape, DType::kFloat32, order);
    SCOPED_TRACE(spec.ToString() + " order " + ShardOrderToString(order) + Str(" trial ", trial));
    std::vector<int> cover(static_cast<size_t>(NumElements(shape)), 0);
    for (const RankRegion& r : AllRankRegions(spec)) {
      for (int d = 0; d < ndim; ++d) {
        const std::vector<int64_t> idx = ReferenceIndices(shape[d], order[d], mesh_shape, r.coordinate);
        const DimInterval want{idx.empty() ? shape[d] : idx[0], static_cast<int64_t>(idx.size())};
        ASSERT_EQ(r.intervals[d], want) << "dim " << d << " rank " << r.rank;
        for (size_t i = 1; i < idx.size(); ++i) ASSERT_EQ(idx[i], idx[i - 1] + 1);
      }
      // Count coverage only for ranks at coordinate 0 of every non-Shard axis.
      bool representative = true;
      for (int a = 0; a < mesh_ndim; ++a) representative &= IsShard(placements[a]) || r.coordinate[a] == 0;
      if (!representative) continue;
      std::vector<int64_t> i(static_cast<size_t>(ndim), 0);
      std::function<void(int, int64_t)> mark = [&](int d, int64_t flat) {
        if (d == ndim) return void(++cover[static_cast<size_t>(flat)]);
        for (int64_t k = 0; k < r.intervals[d].length; ++k) mark(d + 1, flat * shape[d] + r.intervals[d].offset + k);
      };
      mark(0, 0);
    }
    for (int c : cover) ASSERT_EQ(c, 1);
  }
}

}  // namespace
}  // namespace tessel::dtensor
