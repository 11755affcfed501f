// core/ops/cuda/offset_calculator_test.cc — the CUDA kernels' index math and bf16 rounding, run on the
// host: OffsetCalculator gives the offsets ForEachStrided (the CPU kernels' loop) gives, over
// broadcast, transposed, sliced and size-1 layouts; FloatToBf16 equals the CPU conversion bit for bit.
#include "core/ops/cuda/offset_calculator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/cuda/bf16.h"
#include "core/tensor/dtype.h"
#include "core/tensor/strided_loop.h"

namespace tessel::cuda {
namespace {

void ExpectSameOffsets(const std::vector<int64_t>& sizes, const std::vector<std::vector<int64_t>>& st) {
  const auto calc = OffsetCalculator<3>::Make(sizes, {std::span<const int64_t>(st[0]), std::span<const int64_t>(st[1]),
                                                      std::span<const int64_t>(st[2])});
  ASSERT_GE(calc.ndim, 0);
  int64_t i = 0;
  ForEachStrided<3>(sizes, {std::span<const int64_t>(st[0]), std::span<const int64_t>(st[1]),
                            std::span<const int64_t>(st[2])},
                    [&](const int64_t* want) {
                      int64_t got[3];
                      calc.Get(i, got);
                      for (int k = 0; k < 3; ++k) ASSERT_EQ(got[k], want[k]) << "index " << i << " operand " << k;
                      ++i;
                    });
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  EXPECT_EQ(i, numel);
}

TEST(OffsetCalculatorTest, MatchesCpuLoopOnBroadcastTransposedAndSlicedLayouts) {
  // out [4, 5, 3] contiguous; a broadcasts over dim 1; b is a transposed [3, 5] view broadcast over dim 0.
  ExpectSameOffsets({4, 5, 3}, {{15, 3, 1}, {3, 0, 1}, {0, 1, 5}});
  // A slice with stride 2 on the last dim and a size-1 dim in the middle.
  ExpectSameOffsets({2, 1, 6}, {{6, 6, 1}, {24, 12, 2}, {0, 0, 0}});
  // 0-d tensors and single elements.
  ExpectSameOffsets({}, {{}, {}, {}});
  ExpectSameOffsets({1, 1}, {{1, 1}, {0, 0}, {7, 3}});
}

TEST(OffsetCalculatorTest, MergesDimsContiguousForEveryOperandOnly) {
  // t: dim 0 is innermost in memory (stride 1), dims 1 and 2 are contiguous with each other (12 = 4 * 3),
  // so with t only dims 1 and 2 merge; with contiguous operands everything merges.
  const std::vector<int64_t> sizes = {4, 5, 3}, c = {15, 3, 1}, t = {1, 12, 4};
  EXPECT_EQ((OffsetCalculator<3>::Make(sizes, {std::span<const int64_t>(c), std::span<const int64_t>(c),
                                               std::span<const int64_t>(c)})
                 .ndim),
            1);
  EXPECT_EQ((OffsetCalculator<3>::Make(sizes, {std::span<const int64_t>(c), std::span<const int64_t>(c),
                                               std::span<const int64_t>(t)})
                 .ndim),
            2);
}

TEST(OffsetCalculatorTest, RandomLayoutsMatchCpuLoop) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 200; ++trial) {
    const int nd = static_cast<int>(rng() % 6);
    std::vector<int64_t> sizes(nd);
    for (auto& s : sizes) s = 1 + rng() % 4;
    std::vector<std::vector<int64_t>> st(3, std::vector<int64_t>(nd));
    for (auto& v : st) {
      for (auto& s : v) s = static_cast<int64_t>(rng() % 3 == 0 ? 0 : rng() % 50);
    }
    SCOPED_TRACE(trial);
    ExpectSameOffsets(sizes, st);
  }
}

TEST(OffsetCalculatorTest, TooManyDimsAreReportedNotTruncated) {
  const std::vector<int64_t> sizes(kMaxDims + 1, 2);
  std::vector<int64_t> st(kMaxDims + 1);
  for (int d = 0; d <= kMaxDims; ++d) st[d] = int64_t{1} << (2 * d + 1);  // gaps: nothing merges
  EXPECT_EQ((OffsetCalculator<3>::Make(sizes, {std::span<const int64_t>(st), std::span<const int64_t>(st),
                                               std::span<const int64_t>(st)})
                 .ndim),
            -1);
}

TEST(Bf16Test, KernelRoundingEqualsCpuConversionBitForBit) {
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 1.0f / 3, 65504.0f, 1e-40f, -3.14159f,
                               std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
  }
  for (float f : values) {
    ASSERT_EQ(FloatToBf16(f), FloatToBFloat16Bits(f)) << f;
    const uint16_t h = FloatToBf16(f);
    const float back = Bf16ToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(back));
    } else {
      EXPECT_EQ(back, BFloat16BitsToFloat(h));
    }
  }
}

}  // namespace
}  // namespace tessel::cuda
