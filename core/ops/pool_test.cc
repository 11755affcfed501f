// core/ops/pool_test.cc — window_max, gather_last_dim and scatter_add_last_dim (pool.h) against loops:
// torch's tie and NaN rules, gradients (to the max's position, duplicates summed), gradcheck of the
// gather / scatter pair in float64, and the index errors.
#include "core/ops/pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd/engine.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectErrorContains;
using testing::ExpectGradcheck;
using testing::RandDouble;

TEST(PoolTest, WindowMaxFollowsTorchTiesAndNaNAndRoutesTheGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Row 0: a tie (2 at positions 1 and 3); row 1: NaNs at 2 and 5; row 2: all -inf.
  const std::vector<double> xv = {0, 2, 1, 2, -1, 0.5, 3, -2,  //
                                  1, 0, nan, 4, 2, nan, 0, 1,  //
                                  -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf};
  const std::vector<int64_t> iv = {0, 4, 2, 6,   // k = 0: the first tap of each of 4 windows
                                   1, 5, 3, 7,   // k = 1
                                   3, 6, 5, 7};  // k = 2 (windows overlap, 7 twice in window 3)
  Tensor x = FromDoubles(xv, Shape{3, 8}, DType::kFloat64);
  x.set_requires_grad(true);
  const Tensor index = FromVector(iv, {3, 4});
  const auto [values, arg] = WindowMax(x, index);
  std::vector<double> want_v;
  std::vector<int64_t> want_a;
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t o = 0; o < 4; ++o) {
      double best = xv[static_cast<size_t>(p * 8 + iv[static_cast<size_t>(o)])];
      int64_t at = iv[static_cast<size_t>(o)];
      for (int64_t k = 1; k < 3; ++k) {
        const int64_t j = iv[static_cast<size_t>(k * 4 + o)];
        const double v = xv[static_cast<size_t>(p * 8 + j)];
        if (v > best || std::isnan(v)) best = v, at = j;
      }
      want_v.push_back(best);
      want_a.push_back(at);
    }
  }
  EXPECT_EQ(want_a[0], 1);  // the tie: window 0 = {0, 1, 3} has 2 at 1 and 3: the first wins
  EXPECT_EQ(want_a[6], 5);  // row 1 window 2 = {2, 3, 5}: NaN at 2 and 5, the last NaN
  const std::vector<double> got_v = values.ToDoubleVector();
  for (size_t i = 0; i < want_v.size(); ++i) {
    if (std::isnan(want_v[i])) {
      EXPECT_TRUE(std::isnan(got_v[i])) << i;
    } else {
      EXPECT_EQ(got_v[i], want_v[i]) << i;
    }
  }
  const std::vector<double> got_a = arg.ToDoubleVector();
  for (size_t i = 0; i < want_a.size(); ++i) EXPECT_EQ(got_a[i], static_cast<double>(want_a[i])) << i;
  EXPECT_EQ(arg.dtype(), DType::kInt64);
  EXPECT_FALSE(arg.requires_grad());
  // d values / dx: each output's gradient lands on its position, summed where positions repeat.
  const Tensor g = RandDouble({3, 4}, 7);
  Backward(values, g);
  std::vector<double> want_dx(24, 0.0);
  const std::vector<double> gv = g.ToDoubleVector();
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t o = 0; o < 4; ++o) want_dx[static_cast<size_t>(p * 8 + want_a[static_cast<size_t>(p * 4 + o)])] += gv[static_cast<size_t>(p * 4 + o)];
  ExpectAllClose(x.grad(), want_dx, 0.0, 0.0);
}

TEST(PoolTest, GatherAndScatterAddAreLoopsAndEachOthersGradient) {
  const Tensor x = RandDouble({3, 5}, 1);
  const Tensor idx = FromVector(std::vector<int64_t>{4, 0, 4, 1, 2, 2, 3, 3, 0, 1, 1, 1}, {3, 4});
  const std::vector<double> xv = x.ToDoubleVector(), iv = idx.ToDoubleVector();
  std::vector<double> gathered, scattered(15, 0.0);
  const std::vector<double> src = RandDouble({3, 4}, 2).ToDoubleVector();
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t o = 0; o < 4; ++o) {
      const auto j = static_cast<int64_t>(iv[static_cast<size_t>(p * 4 + o)]);
      gathered.push_back(xv[static_cast<size_t>(p * 5 + j)]);
      scattered[static_cast<size_t>(p * 5 + j)] += src[static_cast<size_t>(p * 4 + o)];
    }
  }
  ExpectAllClose(GatherLastDim(x, idx), gathered, 0.0, 0.0);
  ExpectAllClose(ScatterAddLastDim(FromDoubles(src, Shape{3, 4}, DType::kFloat64), idx, 5), scattered, 1e-15, 0.0);
  ExpectGradcheck([&](const TensorList& in) { return GatherLastDim(in[0], idx); }, {RandDouble({3, 5}, 3)});
  ExpectGradcheck([&](const TensorList& in) { return ScatterAddLastDim(in[0], idx, 5); }, {RandDouble({3, 4}, 4)});
  // float32 in, float32 out (summed in float32)
  EXPECT_EQ(ScatterAddLastDim(FromDoubles(src, Shape{3, 4}, DType::kFloat32), idx, 5).dtype(), DType::kFloat32);
}

TEST(PoolTest, IndexErrors) {
  const Tensor x = RandDouble({2, 4}, 5);
  ExpectErrorContains([&] { WindowMax(x, FromVector(std::vector<int64_t>{0, 4}, {1, 2})); }, ErrorCode::kOutOfRange,
                      {"window_max: index 4 at flat position 1", "outside [0, 4)"});
  ExpectErrorContains([&] { GatherLastDim(x, FromVector(std::vector<int64_t>{0, -1}, {2, 1})); },
                      ErrorCode::kOutOfRange, {"gather_last_dim: index -1"});
  ExpectErrorContains([&] { GatherLastDim(x, FromVector(std::vector<int64_t>{0, 1, 2}, {3, 1})); },
                      ErrorCode::kInvalidArgument, {"the same rows", "[2, 4]", "[3, 1]"});
  ExpectErrorContains([&] { ScatterAddLastDim(RandDouble({2, 2}, 6), FromVector(std::vector<int64_t>{0, 1, 2, 3}, {2, 2}), 3); },
                      ErrorCode::kOutOfRange, {"scatter_add_last_dim: index 3", "outside [0, 3)"});
  ExpectErrorContains([&] { WindowMax(x, FromVector(std::vector<double>{0.0, 1.0}, {1, 2})); },
                      ErrorCode::kInvalidArgument, {"index must be int64"});
}

}  // namespace
}  // namespace tessel
