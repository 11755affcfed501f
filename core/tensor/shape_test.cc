#include "core/tensor/shape.h"

#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/base/testing/expect_error.h"

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
  testing::ExpectErrorContains([] { InferShape(Shape{-1, 5}, 12, "view"); }, ErrorCode::kInvalidArgument,
                               {"shape '[-1, 5]' is invalid for input of size 12", "(view)"});
  testing::ExpectErrorContains([] { InferShape(Shape{-1, -1}, 12, "view"); }, ErrorCode::kInvalidArgument,
                               "only one dimension can be inferred");
}

constexpr int64_t kTwo62 = int64_t{1} << 62;

TEST(ShapeTest, NumElementsRaisesNamingTheShapeInsteadOfWrapping) {
  // (2^62 + 1) * 256 wraps to 256 in int64 arithmetic.
  testing::ExpectErrorContains([] { NumElements(Shape{kTwo62 + 1, 256}); }, ErrorCode::kInvalidArgument,
                               {"shape [4611686018427387905, 256]", "overflows int64"});
  EXPECT_EQ(NumElements(Shape{kTwo62, 1}), kTwo62);
  // A zero anywhere is 0 elements, even after a partial product that would overflow.
  EXPECT_EQ(NumElements(Shape{kTwo62, 4, 0}), 0);
  testing::ExpectErrorContains([] { NumElements(Shape{2, -3}); }, ErrorCode::kInvalidArgument, "negative size -3");
}

TEST(ShapeTest, NumBytesAndStridesAreOverflowChecked) {
  EXPECT_EQ(NumBytes(Shape{3, 5}, 4), 60);
  testing::ExpectErrorContains([] { NumBytes(Shape{kTwo62}, 4); }, ErrorCode::kInvalidArgument,
                               {"shape [4611686018427387904]", "4-byte elements", "overflows int64"});
  // numel is 0, yet the strides of the non-empty dims would still wrap.
  testing::ExpectErrorContains([] { ContiguousStrides(Shape{0, kTwo62, 4}); }, ErrorCode::kInvalidArgument,
                               {"[0, 4611686018427387904, 4]", "strides overflow"});
  EXPECT_EQ(ContiguousStrides(Shape{0, 2, 3}), (Shape{6, 3, 1}));
  testing::ExpectErrorContains([] { CheckedAdd(INT64_MAX, 1, "offset"); }, ErrorCode::kInvalidArgument,
                               "offset: 9223372036854775807 + 1 overflows int64");
}

TEST(ShapeTest, InferShapeRejectsOverflowingRequest) {
  testing::ExpectErrorContains([] { InferShape(Shape{kTwo62, 8, -1}, 16, "view"); }, ErrorCode::kInvalidArgument,
                               "overflows int64");
}

}  // namespace
}  // namespace tessel
