// core/ops/loss_test.cc — cross_entropy against a naive double -log softmax, reductions and
// ignore_index, finite-difference backward, bf16, and error codes/messages.
#include "core/ops/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

// -log softmax(row)[t] per row of a row-major [rows, cols] matrix; 0 for ignored rows.
std::vector<double> NaiveLosses(const std::vector<double>& x, int64_t cols, const std::vector<int64_t>& t,
                                int64_t ignore_index = -100) {
  std::vector<double> out;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore_index) {
      out.push_back(0);
      continue;
    }
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j]);
    out.push_back(-std::log(std::exp(x[r * cols + t[r]]) / s));
  }
  return out;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  Tensor c = Empty(t.sizes(), dtype);
  CopyInto(c, t);
  return c;
}

TEST(LossTest, MeanMatchesNaiveNegativeLogSoftmax) {
  Tensor logits = RandDouble({4, 5}, 1, -3, 3);
  const std::vector<int64_t> t = {0, 3, 4, 1};
  const std::vector<double> l = NaiveLosses(logits.ToDoubleVector(), 5, t);
  const double mean = (l[0] + l[1] + l[2] + l[3]) / 4;
  Tensor loss = CrossEntropy(logits, FromVector(t));
  EXPECT_EQ(loss.dim(), 0);
  ExpectAllClose(loss, {mean}, 1e-14, 1e-14);
  ExpectAllClose(CrossEntropy(CastTo(logits, DType::kFloat32), FromVector(t)), {mean}, 1e-6, 1e-6);
}

TEST(LossTest, IgnoredTargetsAreExcludedFromEveryReduction) {
  Tensor logits = RandDouble({4, 3}, 2, -2, 2);
  const std::vector<int64_t> t = {2, -100, 0, -100};
  const std::vector<double> l = NaiveLosses(logits.ToDoubleVector(), 3, t);
  ExpectAllClose(CrossEntropy(logits, FromVector(t)), {(l[0] + l[2]) / 2}, 1e-14, 1e-14);
  ExpectAllClose(CrossEntropy(logits, FromVector(t), -100, "sum"), {l[0] + l[2]}, 1e-14, 1e-14);
  Tensor none = CrossEntropy(logits, FromVector(t), -100, "none");
  EXPECT_EQ(none.sizes(), (Shape{4}));
  ExpectAllClose(none, {l[0], 0, l[2], 0}, 1e-14, 1e-14);
  // A custom ignore_index that is also a valid class.
  const std::vector<double> l1 = NaiveLosses(logits.ToDoubleVector(), 3, {2, 1, 0, 1}, 1);
  ExpectAllClose(CrossEntropy(logits, FromVector<int64_t>({2, 1, 0, 1}), 1), {(l1[0] + l1[2]) / 2}, 1e-14, 1e-14);
}

// torch's label smoothing per row in double loops: (1 - e)·nll + e·mean_c(-log softmax); 0 if ignored.
std::vector<double> NaiveSmoothed(const std::vector<double>& x, int64_t cols, const std::vector<int64_t>& t, double e) {
  std::vector<double> out;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == -100) {
      out.push_back(0);
      continue;
    }
    double m = -INFINITY, s = 0, mean_nls = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, x[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) mean_nls += (m + std::log(s) - x[r * cols + j]) / cols;
    out.push_back((1 - e) * (m + std::log(s) - x[r * cols + t[r]]) + e * mean_nls);
  }
  return out;
}

TEST(LossTest, LabelSmoothingMatchesTorchsFormulaInEveryReduction) {
  const Tensor logits = RandDouble({4, 5}, 7, -3, 3);
  const std::vector<int64_t> t = {4, -100, 0, 2};
  const std::vector<double> l = NaiveSmoothed(logits.ToDoubleVector(), 5, t, 0.1);
  ExpectAllClose(CrossEntropy(logits, FromVector(t), -100, "none", 0.1), l, 1e-14, 1e-14);
  ExpectAllClose(CrossEntropy(logits, FromVector(t), -100, "sum", 0.1), {l[0] + l[2] + l[3]}, 1e-14, 1e-14);
  ExpectAllClose(CrossEntropy(logits, FromVector(t), -100, "mean", 0.1), {(l[0] + l[2] + l[3]) / 3}, 1e-14, 1e-14);
  ExpectAllClose(CrossEntropy(logits, FromVector(t), -100, "mean", 0.0), CrossEntropy(logits, FromVector(t)), 0, 0);
  ExpectGradcheck([&](const TensorList& in) { return CrossEntropy(in[0], FromVector(t), -100, "mean", 0.25); },
                  {logits});
  EXPECT_TRUE(std::isnan(CrossEntropy(logits, FromVector<int64_t>({-100, -100, -100, -100}), -100, "mean", 0.1)
                             .item<double>()));
  testing::ExpectErrorContains([&] { CrossEntropy(logits, FromVector(t), -100, "mean", 1.5); },
                               ErrorCode::kInvalidArgument, "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
}

TEST(LossTest, AllIgnoredTargetsGiveNaNMeanAndZeroGradient) {
  Tensor logits = RandDouble({2, 3}, 3).set_requires_grad(true);
  Tensor loss = CrossEntropy(logits, FromVector<int64_t>({-100, -100}));
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  ExpectAllClose(CrossEntropy(logits, FromVector<int64_t>({-100, -100}), -100, "sum"), {0.0}, 0, 0);
  Backward(loss);
  ExpectAllClose(logits.grad(), std::vector<double>(6, 0.0), 0, 0);
}

TEST(LossTest, OneDimLogitsTakeAScalarTarget) {
  Tensor logits = FromVector<double>({0.5, -1.0, 2.0});
  const double l = NaiveLosses(logits.ToDoubleVector(), 3, {2})[0];
  Tensor t = Full(std::span<const int64_t>(), 2, DType::kInt64);
  ExpectAllClose(CrossEntropy(logits, t), {l}, 1e-15, 1e-15);
  Tensor none = CrossEntropy(logits, t, -100, "none");
  EXPECT_EQ(none.dim(), 0);
  ExpectAllClose(none, {l}, 1e-15, 1e-15);
  ExpectAllClose(CrossEntropy(logits, FromVector<int64_t>({2})), {l}, 1e-15, 1e-15);
}

TEST(LossTest, LargeLogitsDoNotOverflow) {
  Tensor logits = FromVector<float>({1000, 0, -1000, 0, 1000, 0}, {2, 3});
  ExpectAllClose(CrossEntropy(logits, FromVector<int64_t>({0, 0}), -100, "none"), {0.0, 1000.0}, 1e-4, 1e-6);
}

TEST(LossTest, BackwardIsSoftmaxMinusOneHotOverValidCount) {
  Tensor logits = RandDouble({3, 4}, 4).set_requires_grad(true);
  const std::vector<int64_t> t = {1, -100, 3};
  Backward(CrossEntropy(logits, FromVector(t)));
  const std::vector<double> x = logits.ToDoubleVector();
  std::vector<double> expected(12, 0.0);
  for (int r : {0, 2}) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += std::exp(x[r * 4 + j]);
    for (int j = 0; j < 4; ++j) expected[r * 4 + j] = (std::exp(x[r * 4 + j]) / s - (j == t[r])) / 2;
  }
  ExpectAllClose(logits.grad(), expected, 1e-15, 1e-14);
}

TEST(LossTest, MaskedLogitsGetExactlyZeroGradient) {
  // 64 classes run Eigen's vector exp, which gave 2.9e-39 for exp(-inf): a masked logit's gradient
  // softmax · scale must be exactly 0, as in torch.
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<double> x(2 * 64);
    for (int i = 0; i < 2 * 64; ++i) x[i] = i % 4 == 1 ? -INFINITY : 0.05 * (i % 64);
    Tensor logits = FromDoubles(x, std::vector<int64_t>{2, 64}, dtype).set_requires_grad(true);
    Backward(CrossEntropy(logits, FromVector<int64_t>({0, 10})));
    const std::vector<double> g = logits.grad().ToDoubleVector();
    for (int i = 1; i < 2 * 64; i += 4) EXPECT_EQ(g[i], 0.0) << "masked logit " << i;
    EXPECT_LT(g[0], 0.0);  // the target's gradient is softmax - 1
  }
}

TEST(LossTest, BackwardMatchesFiniteDifferences) {
  Tensor logits = RandDouble({5, 4}, 5, -2, 2);
  Tensor t = FromVector<int64_t>({3, -100, 0, 2, 1});
  for (const char* red : {"mean", "sum", "none"}) {
    SCOPED_TRACE(red);
    ExpectGradcheck([&](const TensorList& in) { return CrossEntropy(in[0], in[1], -100, red); }, {logits, t});
  }
  ExpectGradcheck([](const TensorList& in) { return CrossEntropy(in[0], in[1], 2, "none"); },
                  {logits, FromVector<int64_t>({3, 2, 0, 2, 1})});
  ExpectGradcheck([](const TensorList& in) { return CrossEntropy(in[0], in[1]); },
                  {RandDouble({6}, 6), Full(std::span<const int64_t>(), 4, DType::kInt64)});
}

TEST(LossTest, BFloat16ForwardIsCloseToDoubleReference) {
  Tensor logits = CastTo(RandDouble({8, 16}, 7, -4, 4), DType::kBFloat16);
  const std::vector<int64_t> t = {0, 15, 3, 7, 8, 1, 2, 9};
  const std::vector<double> l = NaiveLosses(logits.ToDoubleVector(), 16, t);
  double mean = 0;
  for (double v : l) mean += v / 8;
  Tensor loss = CrossEntropy(logits, FromVector(t));
  EXPECT_EQ(loss.dtype(), DType::kBFloat16);
  ExpectAllClose(loss, {mean}, 1e-2, 1e-2);
  ExpectAllClose(CrossEntropy(logits, FromVector(t), -100, "none"), l, 2e-2, 1e-2);
}

TEST(LossTest, OutOfRangeTargetsRaiseOutOfRangeNamingValueAndClasses) {
  Tensor logits = Zeros({3, 5});
  ExpectErrorContains([&] { CrossEntropy(logits, FromVector<int64_t>({0, 5, 1})); }, ErrorCode::kOutOfRange,
                      "Target 5 is out of bounds. (cross_entropy: target 5 at index 1 is out of range for 5 classes");
  ExpectErrorContains([&] { CrossEntropy(logits, FromVector<int64_t>({-1, 0, 1})); }, ErrorCode::kOutOfRange,
                      "target -1 at index 0 is out of range for 5 classes; logits [3, 5], ignore_index -100)");
}

TEST(LossTest, BadShapesDtypesAndReductionsRaiseInvalidArgument) {
  ExpectErrorContains([] { CrossEntropy(Zeros({4, 5}), FromVector<int64_t>({0, 1, 2})); },
                      ErrorCode::kInvalidArgument, "cross_entropy: logits [4, 5] need target of shape [4], got [3]");
  ExpectErrorContains([] { CrossEntropy(Zeros({2, 4, 5}), FromVector<int64_t>({0, 1})); },
                      ErrorCode::kInvalidArgument, "cross_entropy: logits must be [N, C] or [C], got [2, 4, 5]");
  ExpectErrorContains([] { CrossEntropy(Zeros({2, 5}), Zeros({2})); }, ErrorCode::kInvalidArgument,
                      "cross_entropy: target must be int64 class indices, got [2, 5] float32, [2] float32");
  ExpectErrorContains([] { CrossEntropy(Zeros({2, 5}), FromVector<int64_t>({0, 1}), -100, "avg"); },
                      ErrorCode::kInvalidArgument, "cross_entropy: reduction must be \"mean\", \"sum\" or \"none\"");
  ExpectErrorContains([] { CrossEntropy(Zeros({5}), FromVector<int64_t>({0, 1})); }, ErrorCode::kInvalidArgument,
                      "cross_entropy: logits [5] need a target of shape [] or [1], got [2]");
}

}  // namespace
}  // namespace tessel
