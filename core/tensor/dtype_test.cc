#include "core/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessel {
namespace {

TEST(DTypeTest, SizesAndNamesFollowPyTorch) {
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2);
  EXPECT_EQ(ElementSize(DType::kInt64), 8);
  EXPECT_EQ(DTypeName(DType::kFloat16), "float16");
  EXPECT_TRUE(IsFloating(DType::kBFloat16));
  EXPECT_FALSE(IsFloating(DType::kInt32));
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.0f + 0x1.0p-8f)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to 1 + 2^-6.
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.0f / 3)), 0.333984375f);
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, HalfRoundTripsAndRoundsToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(f)), f) << f;
  }
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.0f + 0x1.0p-11f)), 1.0f);               // tie → even
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.0f + 3 * 0x1.0p-11f)), 1.0f + 0x1.0p-9f);  // tie → even (up)
  EXPECT_TRUE(std::isinf(HalfBitsToFloat(FloatToHalfBits(70000.0f))));
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.5f * 5.9604645e-08f)), 2 * 5.9604645e-08f);  // subnormal tie → even
}

}  // namespace
}  // namespace tessel
