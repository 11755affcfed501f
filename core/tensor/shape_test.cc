#include "core/tensor/shape.h"

#include <gtest/gtest.h>

#include "core/base/error.h"

namespace tessel {
namespace {

TEST(ShapeTest, ChunkSizesMatchTorchChunk) {
  EXPECT_EQ(ChunkSizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(ChunkSizes(6, 4), (std::vector<int64_t>{2, 2, 2, 0}));
  EXPECT_EQ(ChunkSizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(ChunkSizes(1, 3), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(ChunkSizes(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(ShapeTest, BroadcastFollowsNumpy) {
  EXPECT_EQ(BroadcastShapes(Shape{4, 1, 3}, Shape{5, 1}, "add"), (Shape{4, 5, 3}));
  EXPECT_EQ(BroadcastShapes(Shape{}, Shape{2}, "add"), (Shape{2}));
  try {
    BroadcastShapes(Shape{2, 3}, Shape{4}, "mul");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("mul: shapes [2, 3] and [4]"), std::string::npos) << e.what();
  }
}

TEST(ShapeTest, NormalizeDimAcceptsNegativeAndRejectsOutOfRange) {
  EXPECT_EQ(NormalizeDim(-1, 3, "sum"), 2);
  try {
    NormalizeDim(3, 3, "sum");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("sum: dim 3 out of range"), std::string::npos);
  }
}

TEST(ShapeTest, ViewStridesExistForMergeableDimsOnly) {
  Shape st;
  EXPECT_TRUE(ComputeViewStrides(Shape{2, 3, 4}, Shape{12, 4, 1}, Shape{6, 4}, &st));
  EXPECT_EQ(st, (Shape{4, 1}));
  // Transposed [3, 2] view of a [2, 3] tensor cannot be flattened without a copy.
  EXPECT_FALSE(ComputeViewStrides(Shape{3, 2}, Shape{1, 3}, Shape{6}, &st));
  // But splitting a dim of a transposed view is fine.
  EXPECT_TRUE(ComputeViewStrides(Shape{4, 2}, Shape{1, 4}, Shape{2, 2, 2}, &st));
  EXPECT_EQ(st, (Shape{2, 1, 4}));
}

TEST(ShapeTest, InferShapeResolvesMinusOne) {
  EXPECT_EQ(InferShape(Shape{-1, 4}, 12, "view"), (Shape{3, 4}));
  EXPECT_THROW(InferShape(Shape{-1, 5}, 12, "view"), Error);
  EXPECT_THROW(InferShape(Shape{-1, -1}, 12, "view"), Error);
}

}  // namespace
}  // namespace tessel
