// core/ops/scan_sort_test.cc — CumSum and SortIndicesLastDim (scan_sort.h) against loops: sums in torch's
// order and accumulator, the reverse form, gradcheck, stable order of ties, NaN placement, topk prefixes,
// and the gather of sorted values in every dtype.
#include "core/ops/scan_sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/ops/pool.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;
using testing::ExpectGradcheck;
using testing::RandDouble;

TEST(ScanSortTest, CumSumAddsAlongEachDimInOrderWithTorchsAccumulator) {
  // [2, 3, 70]: dims 0, 1 and 2, forward and reverse, against a double loop (70 inner lanes span two blocks).
  const Tensor x = RandDouble({2, 3, 70}, 7);
  const std::vector<double> xv = x.ToVector<double>();
  const int64_t sizes[3] = {2, 3, 70};
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " reverse " << reverse);
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
      for (int64_t d = dim + 1; d < 3; ++d) inner *= sizes[d];
      const int64_t n = sizes[dim];
      std::vector<double> want(xv.size());
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          double acc = 0;
          for (int64_t s = 0; s < n; ++s) {
            const int64_t l = reverse ? n - 1 - s : s, at = (o * n + l) * inner + i;
            acc += xv[at];
            want[at] = acc;
          }
        }
      }
      EXPECT_EQ(CumSum(x, dim - 3, reverse).ToVector<double>(), want);  // negative dims too
    }
  }
  // float32 sums in double, as torch's CPU cumsum: 2^24 + 1 + 1 is 2^24 + 2, where float32 would stay at 2^24
  const Tensor f = FromDoubles({16777216.0, 1.0, 1.0}, Shape{3}, DType::kFloat32);
  EXPECT_EQ(CumSum(f, 0).ToVector<double>(), (std::vector<double>{16777216.0, 16777216.0, 16777218.0}));
  // integers in int64, NaN and inf where the sequential sum puts them
  EXPECT_EQ(CumSum(FromVector(std::vector<int64_t>{3, -1, 4000000000}, {3}), 0).ToVector<int64_t>(),
            (std::vector<int64_t>{3, 2, 4000000002}));
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> got = CumSum(FromDoubles({1, inf, -inf, 2}, Shape{4}, DType::kFloat64), 0).ToVector<double>();
  EXPECT_EQ(got[1], inf);
  EXPECT_TRUE(std::isnan(got[2]) && std::isnan(got[3]));
  ExpectErrorContains([] { CumSum(FromDoubles({1.0}, Shape{1}, DType::kBool), 0); }, ErrorCode::kInvalidArgument,
                      "cumsum: bool input");
  ExpectErrorContains([&] { CumSum(x, 3); }, ErrorCode::kOutOfRange, "cumsum");
}

TEST(ScanSortTest, CumSumGradientIsTheReverseRunningSum) {
  ExpectGradcheck([](const TensorList& in) { return CumSum(in[0], 1); }, {RandDouble({3, 5, 2}, 3)});
  ExpectGradcheck([](const TensorList& in) { return CumSum(in[0], 0, /*reverse=*/true); }, {RandDouble({4, 3}, 4)});
}

TEST(ScanSortTest, SortIndicesAreStableWithNaNAboveEveryNumber) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> row = {2, nan, -1, 2, inf, nan, -inf, 0};
  const Tensor x = FromDoubles(row, Shape{1, 8}, DType::kFloat32);
  // ascending: -inf(6) -1(2) 0(7) 2(0) 2(3) inf(4) nan(1) nan(5); descending: NaNs first, ties in position order
  EXPECT_EQ(SortIndicesLastDim(x, false).ToVector<int64_t>(), (std::vector<int64_t>{6, 2, 7, 0, 3, 4, 1, 5}));
  EXPECT_EQ(SortIndicesLastDim(x, true).ToVector<int64_t>(), (std::vector<int64_t>{1, 5, 4, 0, 3, 7, 2, 6}));
  for (int64_t k = 0; k <= 8; ++k) {  // topk's indices: the stable order's first k
    const std::vector<int64_t> full = SortIndicesLastDim(x, true).ToVector<int64_t>();
    EXPECT_EQ(SortIndicesLastDim(x, true, k).ToVector<int64_t>(), std::vector<int64_t>(full.begin(), full.begin() + k));
  }
  ExpectErrorContains([&] { SortIndicesLastDim(x, true, 9); }, ErrorCode::kOutOfRange, "topk: k 9 is out of range");
}

TEST(ScanSortTest, SortsManyRowsOfEveryDtypeAgainstStableSortAndGathersTheValues) {
  const int64_t rows = 37, length = 300;  // enough rows for several threads' slices
  std::vector<int64_t> ints(static_cast<size_t>(rows * length));
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int64_t>((i * 7919) % 23) - 11;  // many ties
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kInt32, DType::kUInt8}) {
    SCOPED_TRACE(DTypeName(dt));
    std::vector<double> vals(ints.begin(), ints.end());
    if (dt == DType::kUInt8) {
      for (double& v : vals) v += 11;
    }
    const Tensor x = FromDoubles(vals, Shape{rows, length}, dt);
    for (bool descending : {false, true}) {
      const std::vector<int64_t> got = SortIndicesLastDim(x, descending).ToVector<int64_t>();
      std::vector<double> want_values;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int64_t> order(static_cast<size_t>(length));
        std::iota(order.begin(), order.end(), int64_t{0});
        const double* v = vals.data() + r * length;
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return descending ? v[a] > v[b] : v[a] < v[b]; });
        ASSERT_EQ(std::vector<int64_t>(got.begin() + r * length, got.begin() + (r + 1) * length), order);
        for (int64_t j : order) want_values.push_back(v[j]);
      }
      const Tensor idx = FromVector(got, {rows, length});
      const Tensor sorted = GatherLastDim(x, idx);
      EXPECT_EQ(sorted.dtype(), dt);
      EXPECT_EQ(sorted.ToVector<double>(), want_values);
    }
  }
}

}  // namespace
}  // namespace tessel
