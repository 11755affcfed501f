// core/ops/norm_test.cc — layer_norm / rms_norm against naive double formulas (over the last dim and over several
// trailing dims), finite-difference backward (x, weight, bias), bf16, thread-count independence, and error messages.
#include "core/ops/norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectErrorContains;

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

// Naive references over rows of length `cols`; empty w/b mean "none".
std::vector<double> NaiveLayerNorm(const std::vector<double>& x, int64_t cols, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < cols; ++i) mu += x[r * cols + i] / cols;
    for (int64_t i = 0; i < cols; ++i) var += (x[r * cols + i] - mu) * (x[r * cols + i] - mu) / cols;
    for (int64_t i = 0; i < cols; ++i) {
      double v = (x[r * cols + i] - mu) / std::sqrt(var + eps);
      y[r * cols + i] = v * (w.empty() ? 1.0 : w[i]) + (b.empty() ? 0.0 : b[i]);
    }
  }
  return y;
}

std::vector<double> NaiveRmsNorm(const std::vector<double>& x, int64_t cols, const std::vector<double>& w, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < cols; ++i) ms += x[r * cols + i] * x[r * cols + i] / cols;
    for (int64_t i = 0; i < cols; ++i)
      y[r * cols + i] = x[r * cols + i] / std::sqrt(ms + eps) * (w.empty() ? 1.0 : w[i]);
  }
  return y;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  Tensor c = Empty(t.sizes(), dtype);
  CopyInto(c, t);
  return c;
}

TEST(NormTest, LayerNormMatchesNaiveFormula) {
  Tensor x = RandDouble({2, 3, 5}, 1, -2, 3);
  Tensor w = RandDouble({5}, 2);
  Tensor b = RandDouble({5}, 3);
  const auto xv = x.ToDoubleVector(), wv = w.ToDoubleVector(), bv = b.ToDoubleVector();
  ExpectAllClose(LayerNorm(x, w, b, 1e-5), NaiveLayerNorm(xv, 5, wv, bv, 1e-5), 1e-12, 1e-12);
  ExpectAllClose(LayerNorm(x, Tensor(), Tensor(), 0.1), NaiveLayerNorm(xv, 5, {}, {}, 0.1), 1e-12, 1e-12);
  ExpectAllClose(LayerNorm(x, Tensor(), b, 1e-5), NaiveLayerNorm(xv, 5, {}, bv, 1e-5), 1e-12, 1e-12);
  Tensor y32 = LayerNorm(CastTo(x, DType::kFloat32), CastTo(w, DType::kFloat32), CastTo(b, DType::kFloat32));
  EXPECT_EQ(y32.dtype(), DType::kFloat32);
  ExpectAllClose(y32, NaiveLayerNorm(xv, 5, wv, bv, 1e-5), 1e-5, 1e-5);
}

TEST(NormTest, RmsNormMatchesNaiveFormula) {
  Tensor x = RandDouble({4, 6}, 4, -2, 3);
  Tensor w = RandDouble({6}, 5);
  const auto xv = x.ToDoubleVector(), wv = w.ToDoubleVector();
  ExpectAllClose(RmsNorm(x, w, 1e-6), NaiveRmsNorm(xv, 6, wv, 1e-6), 1e-12, 1e-12);
  ExpectAllClose(RmsNorm(x, Tensor(), 0.5), NaiveRmsNorm(xv, 6, {}, 0.5), 1e-12, 1e-12);
  ExpectAllClose(RmsNorm(CastTo(x, DType::kFloat32), CastTo(w, DType::kFloat32)), NaiveRmsNorm(xv, 6, wv, 1e-6), 1e-5,
                 1e-5);
}

TEST(NormTest, NonContiguousInputMatchesContiguousCopy) {
  Tensor base = RandDouble({5, 4}, 6);
  Tensor xt = MakeView(base, {4, 5}, {1, 4}, 0);  // transpose: rows are strided
  Tensor xc = CastTo(xt, DType::kFloat64);
  Tensor w = RandDouble({5}, 7);
  ExpectAllClose(LayerNorm(xt, w, Tensor()), LayerNorm(xc, w, Tensor()), 0, 0);
  ExpectAllClose(RmsNorm(xt, w), RmsNorm(xc, w), 0, 0);
}

TEST(NormTest, LayerNormReturnsMeanAndRstdAsNonDifferentiableOutputs) {
  Tensor x = FromVector<double>({1, 2, 3, 4, 0, 0, 0, 8}, {2, 4});
  TensorList out = autograd::CallOp(GetOp("layer_norm"), {x, Tensor(), Tensor()}, Attrs().Set("eps", 0.0));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].sizes(), (Shape{2, 1}));
  EXPECT_EQ(out[1].ToVector<double>(), (std::vector<double>{2.5, 2.0}));
  ExpectAllClose(out[2], {1 / std::sqrt(1.25), 1 / std::sqrt(12.0)}, 1e-15, 1e-15);
  TensorList rms = autograd::CallOp(GetOp("rms_norm"), {x, Tensor()}, Attrs().Set("eps", 0.0));
  ASSERT_EQ(rms.size(), 2u);
  ExpectAllClose(rms[1], {1 / std::sqrt(7.5), 1 / std::sqrt(16.0)}, 1e-15, 1e-15);
  EXPECT_EQ(GetOp("layer_norm").non_differentiable_outputs, (std::vector<int>{1, 2}));
  Tensor stats_bf16 = autograd::CallOp(GetOp("layer_norm"), {CastTo(x, DType::kBFloat16), Tensor(), Tensor()},
                                       Attrs().Set("eps", 0.0))[1];
  EXPECT_EQ(stats_bf16.dtype(), DType::kFloat32);
}

TEST(NormTest, LayerNormBackwardMatchesFiniteDifferences) {
  Tensor x = RandDouble({3, 2, 5}, 8, -2, 2);
  Tensor w = RandDouble({5}, 9, 0.5, 1.5);
  Tensor b = RandDouble({5}, 10);
  ExpectGradcheck([](const TensorList& in) { return LayerNorm(in[0], in[1], in[2]); }, {x, w, b});
  ExpectGradcheck([](const TensorList& in) { return LayerNorm(in[0], Tensor(), Tensor()); }, {x});
  ExpectGradcheck([](const TensorList& in) { return LayerNorm(in[0], in[1], Tensor(), 0.3); }, {x, w});
  ExpectGradcheck([](const TensorList& in) { return LayerNorm(in[0], Tensor(), in[1]); }, {x, b});
}

TEST(NormTest, RmsNormBackwardMatchesFiniteDifferences) {
  Tensor x = RandDouble({4, 6}, 11, -2, 2);
  Tensor w = RandDouble({6}, 12, 0.5, 1.5);
  ExpectGradcheck([](const TensorList& in) { return RmsNorm(in[0], in[1]); }, {x, w});
  ExpectGradcheck([](const TensorList& in) { return RmsNorm(in[0], Tensor(), 0.2); }, {x});
}

TEST(NormTest, OnlyParamsThatRequireGradGetGradients) {
  Tensor x = RandDouble({3, 4}, 13);
  Tensor w = RandDouble({4}, 14).set_requires_grad(true);
  Tensor b = RandDouble({4}, 15);
  Tensor y = LayerNorm(x, w, b);
  Backward(y, OnesLike(y));
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  TensorList g = autograd::CallOp(GetOp("layer_norm_backward"),
                                  {OnesLike(x), x, w, Zeros({3, 1}, DType::kFloat64), Ones({3, 1}, DType::kFloat64)},
                                  Attrs().Set("output_mask", std::vector<int64_t>{1, 0, 0}));
  ASSERT_EQ(g.size(), 3u);
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(g[2].defined());
}

TEST(NormTest, BFloat16ForwardIsCloseToDoubleReference) {
  Tensor x = CastTo(RandDouble({8, 32}, 16, -3, 3), DType::kBFloat16);
  Tensor w = CastTo(RandDouble({32}, 17), DType::kBFloat16);
  Tensor b = CastTo(RandDouble({32}, 18), DType::kBFloat16);
  const auto xv = x.ToDoubleVector(), wv = w.ToDoubleVector(), bv = b.ToDoubleVector();
  Tensor y = LayerNorm(x, w, b);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  ExpectAllClose(y, NaiveLayerNorm(xv, 32, wv, bv, 1e-5), 2e-2, 1e-2);
  ExpectAllClose(RmsNorm(x, w), NaiveRmsNorm(xv, 32, wv, 1e-6), 2e-2, 1e-2);
}

TEST(NormTest, ParamGradsAreBitwiseIndependentOfThreadCount) {
  Generator gen(19);
  Tensor x = Randn({300, 24}, gen);
  Tensor w = Randn({24}, gen);
  Tensor b = Randn({24}, gen);
  Tensor g = Randn({300, 24}, gen);
  auto grads = [&](int threads) {
    NumThreadsGuard guard(threads);
    Tensor xl = Detach(x).set_requires_grad(true);
    Tensor wl = Clone(w).set_requires_grad(true);
    Tensor bl = Clone(b).set_requires_grad(true);
    Backward(LayerNorm(xl, wl, bl), g);
    return std::vector<std::vector<double>>{xl.grad().ToDoubleVector(), wl.grad().ToDoubleVector(),
                                            bl.grad().ToDoubleVector()};
  };
  EXPECT_EQ(grads(1), grads(2));
  EXPECT_EQ(grads(1), grads(4));
}

// Over two trailing dims [3, 4] the rows are the 12 elements of each [3, 4] slice, as torch's
// LayerNorm([3, 4]); weight and bias keep that shape, and their gradients come back in it.
TEST(NormTest, NormsOverSeveralTrailingDimsMatchNaiveFormulaAndFiniteDifferences) {
  Tensor x = RandDouble({2, 3, 4}, 11, -2, 3);
  Tensor w = RandDouble({3, 4}, 12);
  Tensor b = RandDouble({3, 4}, 13);
  const auto xv = x.ToDoubleVector(), wv = w.ToDoubleVector(), bv = b.ToDoubleVector();
  const Tensor y = LayerNormOver(x, {3, 4}, w, b, 1e-5);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4}));
  ExpectAllClose(y, NaiveLayerNorm(xv, 12, wv, bv, 1e-5), 1e-12, 1e-12);
  ExpectAllClose(RmsNormOver(x, {3, 4}, w, 0.1), NaiveRmsNorm(xv, 12, wv, 0.1), 1e-12, 1e-12);
  ExpectAllClose(LayerNormOver(x, {4}, Tensor(), Tensor(), 1e-5), NaiveLayerNorm(xv, 4, {}, {}, 1e-5), 1e-12,
                 1e-12);
  ExpectGradcheck([](const TensorList& in) { return LayerNormOver(in[0], {3, 4}, in[1], in[2], 1e-5); }, {x, w, b});
  ExpectGradcheck([](const TensorList& in) { return RmsNormOver(in[0], {3, 4}, in[1], 0.2); }, {x, w});
  ExpectErrorContains([] { LayerNormOver(Zeros({2, 4, 3}), {3, 4}, Tensor(), Tensor(), 1e-5); },
                      ErrorCode::kInvalidArgument,
                      "layer_norm: Given normalized_shape=[3, 4], expected input with shape [*, 3, 4], but got input "
                      "of size[2, 4, 3]");
  ExpectErrorContains([] { RmsNormOver(Zeros({4}), {3, 4}, Tensor(), 1e-5); }, ErrorCode::kInvalidArgument,
                      "rms_norm: Given normalized_shape=[3, 4]");
}

TEST(NormTest, BadArgumentsRaiseErrorsNamingOpAndShapes) {
  ExpectErrorContains(
      [] {
        LayerNorm(Zeros({2, 5}), Zeros({4}), Tensor());
      },
      ErrorCode::kInvalidArgument, "layer_norm: input 1 must have shape [5] (the last dim of x [2, 5]), got [4]");
  ExpectErrorContains(
      [] {
        LayerNorm(Zeros({2, 5}), Tensor(), Zeros({5, 1}));
      },
      ErrorCode::kInvalidArgument, "layer_norm: input 2 must have shape [5]");
  ExpectErrorContains(
      [] {
        RmsNorm(Zeros({2, 5}), Zeros({5}, DType::kFloat64));
      },
      ErrorCode::kInvalidArgument, "rms_norm: input 1 has dtype float64 but x has float32");
  ExpectErrorContains([] { RmsNorm(Zeros({3}, DType::kInt64), Tensor()); }, ErrorCode::kInvalidArgument,
                      "rms_norm: expected a floating dtype, got [3] int64");
  ExpectErrorContains([] { LayerNorm(Scalar(1.0), Tensor(), Tensor()); }, ErrorCode::kInvalidArgument,
                      "layer_norm: expected x with at least 1 dim, got [] float32");
}

}  // namespace
}  // namespace tessel
