#include "core/tensor/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/tensor/factory.h"
#include "core/tensor/mt19937.h"

namespace tessel {
namespace {

// The vectorized twist and tempering against libstdc++'s scalar MT19937: the same words for the same seed, across
// fills that start and end inside a block of 624, and after discards inside and across blocks.
TEST(Mt19937Test, WordsEqualStdMt19937) {
  for (uint32_t seed : {0u, 5u, 42u, 4294967295u}) {
    Mt19937 fast(seed);
    std::mt19937 reference(seed);
    std::vector<uint32_t> words(5003);
    fast.Fill(std::span<uint32_t>(words.data(), 7));
    fast.Fill(std::span<uint32_t>(words.data() + 7, 1241));
    fast.Fill(std::span<uint32_t>(words.data() + 1248, words.size() - 1248));
    for (size_t i = 0; i < words.size(); ++i) ASSERT_EQ(words[i], reference()) << "seed " << seed << " word " << i;
    for (uint64_t skip : {1u, 600u, 624u, 12345u}) {
      fast.Discard(skip);
      reference.discard(skip);
      uint32_t w = 0;
      fast.Fill(std::span<uint32_t>(&w, 1));
      ASSERT_EQ(w, reference()) << "seed " << seed << " after discarding " << skip;
    }
  }
}

TEST(RandomTest, PhiloxMatchesReferenceVector) {
  // Known-answer vectors of Random123's kat_vectors (philox4x32 10: zeros, all-ones, pi digits).
  auto r = Philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  auto p = Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(p[0], 0xd16cfe09u);
  EXPECT_EQ(p[1], 0x94fdccebu);
  EXPECT_EQ(p[2], 0x5001e420u);
  EXPECT_EQ(p[3], 0x24126ea1u);
  auto f = Philox4x32({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u});
  EXPECT_EQ(f[0], 0x408f276du);
  EXPECT_EQ(f[3], 0x6d5451fdu);
}

TEST(RandomTest, AnySubBlockEqualsTheSameBlockOfTheFullTensor) {
  Generator gen(1234);
  gen.Advance(17);  // a nonzero base offset
  const uint64_t base = gen.offset();
  const Shape full{7, 5, 3};
  Tensor t = Randn(full, gen);
  const std::vector<double> all = t.ToDoubleVector();
  const Shape offs{2, 1, 0};
  const Shape blk{3, 4, 2};
  Tensor b = RandomBlock(full, offs, blk, 1234, base, Distribution::Normal());
  const std::vector<double> got = b.ToDoubleVector();
  int k = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 2; ++l) EXPECT_EQ(got[k++], all[((i + 2) * 5 + (j + 1)) * 3 + l]);
}

TEST(RandomTest, DrawsAdvanceTheOffsetByNumel) {
  Generator gen(7);
  Tensor a = Rand({10}, gen);
  EXPECT_EQ(gen.offset(), 10u);
  Tensor b = Rand({10}, gen);
  EXPECT_NE(a.ToDoubleVector(), b.ToDoubleVector());
  Generator again(7);
  EXPECT_EQ(Rand({10}, again).ToDoubleVector(), a.ToDoubleVector());
}

TEST(RandomTest, MomentsAndRangesAreRight) {
  Generator gen(99);
  const auto u = Rand({20000}, gen, DType::kFloat64).ToDoubleVector();
  const auto n = Randn({20000}, gen, DType::kFloat64).ToDoubleVector();
  const auto r = Randint(3, 7, std::vector<int64_t>{2000}, gen).ToDoubleVector();
  double su = 0, sn = 0, sn2 = 0;
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    su += v;
  }
  for (double v : n) sn += v, sn2 += v * v;
  for (double v : r) {
    ASSERT_GE(v, 3);
    ASSERT_LT(v, 7);
    ASSERT_EQ(v, std::floor(v));
  }
  EXPECT_NEAR(su / u.size(), 0.5, 0.01);
  EXPECT_NEAR(sn / n.size(), 0.0, 0.03);
  EXPECT_NEAR(sn2 / n.size(), 1.0, 0.04);
}

TEST(GeneratorThreadTest, DrawFromASecondThreadWhileTheOwnerRunsIsFailedPrecondition) {
  Generator gen(42);
  std::promise<void> drawn, release;
  std::thread owner([&] {
    Randn({4}, gen);  // this thread now owns gen and keeps running until released
    drawn.set_value();
    release.get_future().wait();
  });
  drawn.get_future().wait();
  const uint64_t offset = gen.offset();
  testing::ExpectErrorContains([&] { Randn({4}, gen); }, ErrorCode::kFailedPrecondition,
                               {"Generator(seed=42) is used from two threads at once", "its own Generator"});
  EXPECT_EQ(gen.offset(), offset);  // the refused draw reserved nothing
  // A copy is unowned: one copy per thread is the fix.
  Generator mine = gen;
  EXPECT_EQ(Randn({4}, mine).ToVector<float>().size(), 4u);
  release.set_value();
  owner.join();
  // Once the owner has exited, the generator passes to the next thread that draws.
  Tensor after = Randn({4}, gen);
  EXPECT_EQ(gen.offset(), offset + 4);
}

}  // namespace
}  // namespace tessel
