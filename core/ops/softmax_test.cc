#include "core/ops/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

Tensor RandOf(std::vector<int64_t> shape, uint64_t seed, DType dtype, double lo = -4, double hi = 4) {
  Generator gen(seed);
  return Random(shape, gen, Distribution::Uniform(lo, hi), dtype);
}

// (log_)softmax of x's values along `dim` by loops in double.
std::vector<double> Naive(const Tensor& x, int64_t dim, bool log) {
  const std::vector<double> v = x.ToDoubleVector();
  dim = (dim + x.dim()) % x.dim();
  int64_t a = 1, n = x.size(dim), k = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) a *= x.size(d);
    if (d > dim) k *= x.size(d);
  }
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      auto at = [&](int64_t r) { return (i * n + r) * k + j; };
      double mx = -INFINITY, sum = 0;
      for (int64_t r = 0; r < n; ++r) mx = std::max(mx, v[at(r)]);
      for (int64_t r = 0; r < n; ++r) sum += std::exp(v[at(r)] - mx);
      for (int64_t r = 0; r < n; ++r) {
        out[at(r)] = log ? v[at(r)] - mx - std::log(sum) : std::exp(v[at(r)] - mx) / sum;
      }
    }
  }
  return out;
}

TEST(SoftmaxTest, MatchesNaiveLoopsAlongEveryDimInEveryFloatDtype) {
  struct Tol {
    DType dtype;
    double atol, rtol;
  };
  for (Tol t : {Tol{DType::kFloat64, 1e-15, 1e-13}, Tol{DType::kFloat32, 1e-6, 1e-5},
                Tol{DType::kBFloat16, 2e-3, 8e-3}, Tol{DType::kFloat16, 1e-3, 2e-3}}) {
    Tensor x = RandOf({3, 5, 7}, 1, t.dtype);
    for (int64_t dim : {-1, 0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << t.dtype << " dim " << dim);
      Tensor p = Softmax(x, dim);
      Tensor lp = LogSoftmax(x, dim);
      EXPECT_EQ(p.dtype(), t.dtype);
      EXPECT_EQ(p.sizes(), x.sizes());
      ExpectAllClose(p, Naive(x, dim, false), t.atol, t.rtol);
      ExpectAllClose(lp, Naive(x, dim, true), t.atol, t.rtol * 4);
    }
  }
}

TEST(SoftmaxTest, LongRowsAndTransposedViewsMatchNaiveLoops) {
  Tensor rows = RandOf({4, 5000}, 2, DType::kFloat32, -20, 20);  // vocabulary-sized rows
  ExpectAllClose(Softmax(rows, -1), Naive(rows, -1, false), 1e-7, 1e-5);
  ExpectAllClose(LogSoftmax(rows, 1), Naive(rows, 1, true), 1e-5, 1e-5);
  Tensor base = RandDouble({6, 4}, 3, -3, 3);
  Tensor xt = MakeView(base, {4, 6}, {1, 4}, 0);
  ASSERT_FALSE(xt.is_contiguous());
  ExpectAllClose(Softmax(xt, -1), Naive(xt, -1, false), 1e-15, 1e-13);
  ExpectAllClose(LogSoftmax(xt, 0), Naive(xt, 0, true), 1e-15, 1e-13);
}

TEST(SoftmaxTest, IsStableForLargeAndMaskedInputs) {
  Tensor x = FromVector<float>({1000, 1001, -INFINITY, 999});
  ExpectAllClose(Softmax(x, 0), std::vector<double>{0.24472847, 0.66524096, 0, 0.09003057}, 1e-7, 1e-6);
  ExpectAllClose(LogSoftmax(x, 0), std::vector<double>{-1.40760596, -0.40760596, -INFINITY, -2.40760596}, 1e-6, 1e-6);
  // A fully masked row has no distribution: NaN, as in torch.
  Tensor masked = FromVector<float>({-INFINITY, -INFINITY});
  EXPECT_TRUE(std::isnan(Softmax(masked, 0).ToDoubleVector()[0]));
  Tensor with_nan = FromVector<float>({1, std::nanf(""), 2});
  for (double v : Softmax(with_nan, 0).ToDoubleVector()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(Softmax(Scalar(3.0), 0).ItemDouble(), 1.0);
  EXPECT_EQ(Softmax(Zeros({0, 3}), 1).sizes(), (Shape{0, 3}));
}

TEST(SoftmaxTest, MaskedEntriesOfLongRowsAreExactlyZero) {
  // A 64-wide row runs Eigen's vector exp, which gave 2.9e-39 for exp(-inf) instead of 0.
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<double> x(64);
    for (int i = 0; i < 64; ++i) x[i] = i % 3 == 0 ? -INFINITY : 0.1 * i;
    const Tensor t = FromDoubles(x, std::vector<int64_t>{64}, dtype);
    const std::vector<double> y = Softmax(t, 0).ToDoubleVector();
    for (int i = 0; i < 64; i += 3) EXPECT_EQ(y[i], 0.0) << "masked entry " << i;
    // log_softmax's backward: d = g - softmax · sum(g), and softmax is exactly 0 where the output is -inf.
    Tensor leaf = FromDoubles(x, std::vector<int64_t>{64}, dtype);
    leaf.set_requires_grad(true);
    // A zero incoming gradient at the masked entries: d there is -softmax · sum(g), exactly -0 (2.9e-39
    // · sum(g) before the fix, which survives the subtraction from 0).
    std::vector<double> g(64);
    for (int i = 0; i < 64; ++i) g[i] = i % 3 == 0 ? 0.0 : 0.5 + 0.01 * i;
    Backward(LogSoftmax(leaf, 0), FromDoubles(g, std::vector<int64_t>{64}, dtype));
    const std::vector<double> d = leaf.grad().ToDoubleVector();
    for (int i = 0; i < 64; i += 3) EXPECT_EQ(d[i], 0.0) << "masked entry " << i;
  }
}

TEST(SoftmaxTest, BackwardMatchesFiniteDifferences) {
  Tensor x = RandDouble({3, 4, 5}, 4, -2, 2);
  for (int64_t dim : {-1, 0, 1}) {
    SCOPED_TRACE(dim);
    ExpectGradcheck([dim](const TensorList& in) { return Softmax(in[0], dim); }, {x});
    ExpectGradcheck([dim](const TensorList& in) { return LogSoftmax(in[0], dim); }, {x});
  }
}

TEST(SoftmaxTest, BFloat16BackwardMatchesFloat64Formula) {
  Tensor x64 = RandDouble({3, 40}, 5, -2, 2);
  Tensor g64 = RandDouble({3, 40}, 6, -1, 1);
  for (bool log : {false, true}) {
    SCOPED_TRACE(log);
    Tensor want_x = Detach(x64).set_requires_grad(true);
    Tensor y = log ? LogSoftmax(want_x, -1) : Softmax(want_x, -1);
    Backward(y, g64);
    auto to_bf16 = [](const Tensor& t) { return FromDoubles(t.ToDoubleVector(), t.sizes(), DType::kBFloat16); };
    Tensor x16 = to_bf16(x64).set_requires_grad(true);
    Tensor y16 = log ? LogSoftmax(x16, -1) : Softmax(x16, -1);
    Backward(y16, to_bf16(g64));
    EXPECT_EQ(x16.grad().dtype(), DType::kBFloat16);
    ExpectAllClose(x16.grad(), want_x.grad(), 2e-2, 3e-2);
  }
}

TEST(SoftmaxTest, MisuseRaisesNamedErrors) {
  ExpectErrorContains([] { Softmax(Zeros({2, 3}), 2); }, ErrorCode::kOutOfRange, "softmax: dim 2 out of range");
  ExpectErrorContains([] { LogSoftmax(Zeros({2, 3}), -3); }, ErrorCode::kOutOfRange,
                      "log_softmax: dim -3 out of range");
  ExpectErrorContains([] { Softmax(Zeros({2}, DType::kInt64), 0); }, ErrorCode::kInvalidArgument,
                      "softmax: expected a floating dtype, got int64");
}

}  // namespace
}  // namespace tessel
