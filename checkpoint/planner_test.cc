// checkpoint/planner_test.cc — the indexed read plan and the global save plan (pure functions).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "checkpoint/chunk_index.h"
#include "checkpoint/save_plan.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"

namespace tessel::checkpoint {
namespace {

using ::tessel::testing::ExpectErrorContains;

// A grid of torch.chunk-like boxes over `shape` with `cuts` pieces per dim.
std::vector<Box> Grid(const Shape& shape, const Shape& cuts) {
  std::vector<Box> out = {Box{}};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<Box> next;
    const int64_t step = (shape[d] + cuts[d] - 1) / cuts[d];
    for (const Box& b : out) {
      for (int64_t o = 0; o < shape[d]; o += step) {
        Box c = b;
        c.offsets.push_back(o);
        c.sizes.push_back(std::min(step, shape[d] - o));
        next.push_back(c);
      }
    }
    out = next;
  }
  return out;
}

TEST(ChunkIndexTest, OverlappingMatchesBruteForceOnGridsAndQueries) {
  std::mt19937 rng(7);
  for (const auto& [shape, cuts] : std::vector<std::pair<Shape, Shape>>{
           {{13}, {4}}, {{9, 10}, {3, 4}}, {{7, 5, 6}, {2, 3, 2}}, {{64, 3}, {64, 1}}}) {
    const std::vector<Box> boxes = Grid(shape, cuts);
    const ChunkIndex index(boxes);
    for (int q = 0; q < 200; ++q) {
      Box query;
      for (int64_t n : shape) {
        const int64_t a = static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
        const int64_t b = a + 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n - a));
        query.offsets.push_back(a);
        query.sizes.push_back(b - a);
      }
      std::vector<int> brute;
      for (size_t i = 0; i < boxes.size(); ++i) {
        if (Intersect(boxes[i], query)) brute.push_back(static_cast<int>(i));
      }
      ASSERT_EQ(index.Overlapping(query), brute) << "query " << BoxToString(query);
    }
  }
}

TEST(ChunkIndexTest, IndexesTheDimWithMostDistinctStartsAndPlansOverlaps) {
  const ChunkIndex index(Grid({8, 16}, {2, 8}));
  EXPECT_EQ(index.dim(), 1);
  const std::vector<ReadItem> reads = PlanReads(index, Box{{3, 5}, {2, 2}});
  ASSERT_EQ(reads.size(), 4u);  // rows 3 and 4 straddle the dim-0 cut, cols 5-6 the dim-1 cut at 6
  EXPECT_EQ(reads[0].overlap, (Box{{3, 5}, {1, 1}}));
  EXPECT_EQ(reads[3].overlap, (Box{{4, 6}, {1, 1}}));
  const ChunkIndex scalar({Box{}});
  EXPECT_EQ(scalar.Overlapping(Box{}), std::vector<int>{0});
}

TEST(ChunkIndexTest, ReadPlanForManyTargetsOverManyChunksIsNotQuadratic) {
  constexpr int kN = 1 << 16;  // a scan would intersect 2^32 box pairs (minutes); the index a few per query
  std::vector<Box> boxes;
  for (int i = 0; i < kN; ++i) boxes.push_back(Box{{3 * i}, {3}});
  const auto t0 = std::chrono::steady_clock::now();
  const ChunkIndex index(boxes);
  int64_t reads = 0;
  for (int q = 0; q < kN; ++q) reads += static_cast<int64_t>(PlanReads(index, Box{{3 * q + 1}, {3}}).size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(reads, 2 * kN - 1);  // target q straddles chunks q and q + 1
  EXPECT_LT(seconds, 5.0);       // ~0.05 s measured; a quadratic plan is four orders of magnitude slower
}

WriteItem TensorItem(const std::string& fqn, Shape shape, Box box) {
  WriteItem it{.fqn = fqn, .dtype = DType::kFloat32, .global_shape = shape, .box = box, .layout = "x"};
  it.nbytes = Volume(box) * 4;
  return it;
}

// `world` ranks each holding the whole [n] tensor `fqn` (replicated).
std::vector<LocalSavePlan> Replicated(int world, const std::vector<std::pair<std::string, int64_t>>& tensors) {
  std::vector<LocalSavePlan> plans(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    plans[static_cast<size_t>(r)].rank = r;
    for (const auto& [fqn, n] : tensors)
      plans[static_cast<size_t>(r)].items.push_back(TensorItem(fqn, {n}, FullBox({n})));
  }
  return plans;
}

TEST(SavePlanTest, ReplicatedChunksAreWrittenOnceAndBalancedByBytes) {
  const std::vector<LocalSavePlan> plans = Replicated(3, {{"a", 100}, {"b", 60}, {"c", 50}, {"d", 40}, {"e", 10}});
  const GlobalSavePlan g = PlanGlobalSave(plans);
  int64_t written = 0;
  for (const auto& w : g.writes) written += static_cast<int64_t>(w.size());
  EXPECT_EQ(written, 5);  // each replicated tensor exactly once
  // Largest first to the least-loaded rank: a→0, b→1, c→2, d→2 (200 vs 240 vs 360), e→1.
  EXPECT_EQ(g.bytes_per_rank, (std::vector<int64_t>{400, 280, 360}));
  EXPECT_EQ(g.writes[2], (std::vector<int>{2, 3}));
}

TEST(SavePlanTest, ShardsStayWithTheirOwnerAndEmptyShardsWriteNothing) {
  std::vector<LocalSavePlan> plans(4);
  for (int r = 0; r < 4; ++r) {
    plans[static_cast<size_t>(r)].rank = r;
    const int64_t off = std::min<int64_t>(2 * r, 6);
    plans[static_cast<size_t>(r)].items.push_back(TensorItem("w", {6, 3}, Box{{off, 0}, {r < 3 ? 2 : 0, 3}}));
  }
  const GlobalSavePlan g = PlanGlobalSave(plans);
  EXPECT_EQ(g.writes, (std::vector<std::vector<int>>{{0}, {0}, {0}, {}}));
  EXPECT_EQ(g.bytes_per_rank, (std::vector<int64_t>{24, 24, 24, 0}));
}

TEST(SavePlanTest, InconsistentRanksAreRefusedNamingFqnAndRanks) {
  std::vector<LocalSavePlan> shape = Replicated(2, {{"w", 8}});
  shape[1].items[0] = TensorItem("w", {9}, FullBox({9}));
  ExpectErrorContains([&] { PlanGlobalSave(shape); }, ErrorCode::kInvalidArgument,
              "'w' on ranks 0 and 1 has global float32 [8] vs float32 [9]");
  std::vector<LocalSavePlan> gap(2);
  gap[0].items.push_back(TensorItem("w", {8}, Box{{0}, {3}}));
  gap[1].rank = 1;
  gap[1].items.push_back(TensorItem("w", {8}, Box{{4}, {4}}));
  ExpectErrorContains([&] { PlanGlobalSave(gap); }, ErrorCode::kInvalidArgument, "cover 7 of the 8 elements");
  std::vector<LocalSavePlan> overlap = gap;
  overlap[0].items[0] = TensorItem("w", {8}, Box{{0}, {5}});
  ExpectErrorContains([&] { PlanGlobalSave(overlap); }, ErrorCode::kInvalidArgument, "overlap: [0:5] (rank 0) and [4:8]");
  std::vector<LocalSavePlan> bytes(2);
  bytes[1].rank = 1;
  for (int r = 0; r < 2; ++r) {
    bytes[static_cast<size_t>(r)].items.push_back(
        WriteItem{.fqn = "rng", .kind = ItemKind::kBytes, .nbytes = 16, .content_hash = static_cast<uint64_t>(r)});
  }
  ExpectErrorContains([&] { PlanGlobalSave(bytes); }, ErrorCode::kInvalidArgument, "per-rank keys (e.g. 'rng.rank1')");
}

TEST(SavePlanTest, LocalPlanEncodingRoundTrips) {
  LocalSavePlan p;
  p.rank = 3;
  p.save_id = "abc";
  p.items.push_back(TensorItem("w", {4, 4}, Box{{2, 0}, {2, 4}}));
  p.items.push_back(WriteItem{.fqn = "lr", .kind = ItemKind::kValue, .content_hash = 9, .value = 0.1});
  const LocalSavePlan back = DecodeLocalPlan(EncodeLocalPlan(p));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.save_id, "abc");
  EXPECT_EQ(back.items[0].box, (Box{{2, 0}, {2, 4}}));
  EXPECT_EQ(back.items[0].nbytes, 32);
  EXPECT_EQ(std::get<double>(back.items[1].value), 0.1);
  EXPECT_EQ(back.items[1].content_hash, 9u);
}

}  // namespace
}  // namespace tessel::checkpoint
