// core/ops/index_dim_test.cc — GatherDim and ScatterAddDim (index_dim.h) against index loops on every dim,
// their gradients (gradcheck in float64), torch's per-add rounding of bfloat16 sums, and the errors.
#include "core/ops/index_dim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;
using testing::ExpectGradcheck;
using testing::RandDouble;

// Flat offset of (a, b, c) in a contiguous [A, B, C] tensor.
int64_t At(const std::vector<int64_t>& shape, int64_t a, int64_t b, int64_t c) { return (a * shape[1] + b) * shape[2] + c; }

TEST(IndexDimTest, GatherAndScatterAddOnEveryDimMatchLoops) {
  const std::vector<int64_t> xs = {3, 4, 300};  // 300 inner lanes span two lane blocks
  const Tensor x = RandDouble({3, 4, 300}, 5);
  const std::vector<double> xv = x.ToVector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE(dim);
    std::vector<int64_t> is = xs;
    is[static_cast<size_t>(dim)] = 5;  // five picks along dim, with repeats
    std::vector<int64_t> iv;
    for (int64_t i = 0; i < is[0] * is[1] * is[2]; ++i) iv.push_back((i * 7 + i / 3) % xs[static_cast<size_t>(dim)]);
    const Tensor idx = FromVector(iv, Shape(is.begin(), is.end()));
    const Tensor src = RandDouble({is[0], is[1], is[2]}, 6);
    const std::vector<double> sv = src.ToVector<double>();
    std::vector<double> gathered, scattered = xv;
    for (int64_t a = 0; a < is[0]; ++a) {
      for (int64_t b = 0; b < is[1]; ++b) {
        for (int64_t c = 0; c < is[2]; ++c) {
          const int64_t j = iv[static_cast<size_t>(At(is, a, b, c))];
          const int64_t t = At(xs, dim == 0 ? j : a, dim == 1 ? j : b, dim == 2 ? j : c);
          gathered.push_back(xv[static_cast<size_t>(t)]);
        }
      }
    }
    // scatter: contributions in index order along dim, i.e. for each lane, j ascending
    for (int64_t k = 0; k < is[static_cast<size_t>(dim)]; ++k) {
      for (int64_t a = 0; a < is[0]; ++a) {
        for (int64_t b = 0; b < is[1]; ++b) {
          for (int64_t c = 0; c < is[2]; ++c) {
            if ((dim == 0 ? a : dim == 1 ? b : c) != k) continue;
            const int64_t from = At(is, a, b, c), j = iv[static_cast<size_t>(from)];
            scattered[static_cast<size_t>(At(xs, dim == 0 ? j : a, dim == 1 ? j : b, dim == 2 ? j : c))] +=
                sv[static_cast<size_t>(from)];
          }
        }
      }
    }
    EXPECT_EQ(GatherDim(x, dim, idx).ToVector<double>(), gathered);
    EXPECT_EQ(ScatterAddDim(x, dim - 3, idx, src).ToVector<double>(), scattered);
    (void)0;  // (gradients: the next test)
  }
}

TEST(IndexDimTest, GradientsAndBfloat16Rounding) {
  const Tensor idx = FromVector(std::vector<int64_t>{0, 2, 2, 1, 0, 0}, {2, 3});
  ExpectGradcheck([&](const TensorList& in) { return GatherDim(in[0], 1, idx); }, {RandDouble({2, 4}, 1)});
  ExpectGradcheck([&](const TensorList& in) { return ScatterAddDim(in[0], 1, idx, in[1]); },
                  {RandDouble({2, 4}, 2), RandDouble({2, 3}, 3)});
  // bfloat16 sums in float32, rounded once, as torch's: 256 + 1 + 1 is 258 (rounding each add would stay at 256)
  const Tensor self = FromDoubles({256.0}, Shape{1}, DType::kBFloat16);
  const Tensor ones = FromDoubles({1.0, 1.0}, Shape{2}, DType::kBFloat16);
  EXPECT_EQ(ScatterAddDim(self, 0, FromVector(std::vector<int64_t>{0, 0}, {2}), ones).ToVector<double>(),
            (std::vector<double>{258.0}));
  // gather keeps any dtype
  const Tensor ints = FromVector(std::vector<int64_t>{5, 6, 7}, {3});
  EXPECT_EQ(GatherDim(ints, 0, FromVector(std::vector<int64_t>{2, 0}, {2})).ToVector<int64_t>(),
            (std::vector<int64_t>{7, 5}));
}

TEST(IndexDimTest, IndexSelectCopiesRunsAlongEveryDimAndAddsBackInOrder) {
  const Tensor x = RandDouble({3, 4, 5}, 9);
  const std::vector<double> xv = x.ToVector<double>();
  const std::vector<int64_t> pick = {2, 0, 2, 1};
  const std::vector<int64_t> xs = {3, 4, 5};
  for (int64_t dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE(dim);
    const int64_t m = 4;
    std::vector<int64_t> idx(pick.begin(), pick.begin() + m);
    std::vector<int64_t> os = xs;
    os[static_cast<size_t>(dim)] = m;
    std::vector<double> want;
    for (int64_t a = 0; a < os[0]; ++a) {
      for (int64_t b = 0; b < os[1]; ++b) {
        for (int64_t c = 0; c < os[2]; ++c) {
          const int64_t j = idx[static_cast<size_t>(dim == 0 ? a : dim == 1 ? b : c)];
          want.push_back(xv[static_cast<size_t>(At(xs, dim == 0 ? j : a, dim == 1 ? j : b, dim == 2 ? j : c))]);
        }
      }
    }
    const Tensor index = FromVector(idx, {m});
    EXPECT_EQ(IndexSelectDim(x, dim, index).ToVector<double>(), want);
    ExpectGradcheck([&](const TensorList& in) { return IndexSelectDim(in[0], dim, index); },
                    {RandDouble({3, 4, 5}, 8)});
  }
  ExpectErrorContains([&] { IndexSelectDim(x, 1, FromVector(std::vector<int64_t>{4}, {1})); }, ErrorCode::kOutOfRange,
                      "index_select: index 4 is out of bounds for dimension 1 with size 4");
}

TEST(IndexDimTest, ErrorsNameTheIndexAndTheShapes) {
  const Tensor x = RandDouble({2, 3}, 1);
  ExpectErrorContains([&] { GatherDim(x, 1, FromVector(std::vector<int64_t>{0, 3}, {2, 1})); }, ErrorCode::kOutOfRange,
                      "gather: index 3 is out of bounds for dimension 1 with size 3");
  ExpectErrorContains([&] { GatherDim(x, 1, FromVector(std::vector<int64_t>{0, 1, 2}, {3, 1})); },
                      ErrorCode::kInvalidArgument, "gather: index [3, 1] and input [2, 3] differ on dim 0");
  ExpectErrorContains([&] { ScatterAddDim(x, 0, FromVector(std::vector<int64_t>{0, 1, 1}, {1, 3}), RandDouble({1, 2}, 2)); },
                      ErrorCode::kInvalidArgument, "scatter_add: src [1, 2] float64 must have index's shape [1, 3]");
}

}  // namespace
}  // namespace tessel
