// core/ops/batch_norm_test.cc — the fused training batch norm (batch_norm.h) against float64 loops (values,
// statistics), gradients by finite differences (the fused backward) and second derivatives by finite
// differences of the first (the composed create_graph backward), bfloat16 inputs with float32 parameters
// against float64, thread-count independence and errors.
#include "core/ops/batch_norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd/engine.h"
#include "core/base/parallel.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectErrorContains;
using testing::ExpectGradcheck;
using testing::RandDouble;

// Batch norm's training forward by float64 loops over xv (shape [N, C, *]): y, the mean and the biased
// variance per channel; wv / bv empty for no weight / bias.
struct LoopResult {
  std::vector<double> y, mean, var;
};
LoopResult LoopBatchNorm(const std::vector<double>& xv, const Shape& shape, const std::vector<double>& wv,
                         const std::vector<double>& bv, double eps) {
  const int64_t n = shape[0], c = shape[1], s = NumElements(shape) / (n * c);
  LoopResult r{std::vector<double>(xv.size()), {}, {}};
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += xv[static_cast<size_t>((i * c + ch) * s + j)];
    const double mu = sum / static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sq += std::pow(xv[static_cast<size_t>((i * c + ch) * s + j)] - mu, 2);
    const double v = sq / static_cast<double>(n * s);
    r.mean.push_back(mu), r.var.push_back(v);
    const double w = wv.empty() ? 1.0 : wv[static_cast<size_t>(ch)], b = bv.empty() ? 0.0 : bv[static_cast<size_t>(ch)];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const size_t k = static_cast<size_t>((i * c + ch) * s + j);
        r.y[k] = (xv[k] - mu) / std::sqrt(v + eps) * w + b;
      }
  }
  return r;
}

TEST(BatchNormTest, ValuesAndStatisticsMatchLoops) {
  for (const Shape& shape : {Shape{4, 3, 5, 2}, Shape{6, 4}, Shape{2, 3, 7}}) {
    SCOPED_TRACE(ShapeStr(shape));
    const int64_t c = shape[1];
    std::vector<double> xv(static_cast<size_t>(NumElements(shape)));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7 * static_cast<double>(i)) * 3 + static_cast<double>(i % 5);
    const Tensor x = FromDoubles(xv, shape, DType::kFloat64);
    const Tensor w = RandDouble({c}, 1), b = RandDouble({c}, 2);
    const auto [y, mean, var] = BatchNormTraining(x, w, b, 1e-5);
    const LoopResult want = LoopBatchNorm(xv, shape, w.ToDoubleVector(), b.ToDoubleVector(), 1e-5);
    ExpectAllClose(y, want.y, 1e-12, 1e-12);
    ExpectAllClose(mean, want.mean, 1e-12, 1e-12);
    ExpectAllClose(var, want.var, 1e-12, 1e-12);
    EXPECT_FALSE(mean.requires_grad());
  }
}

TEST(BatchNormTest, GradientsAndSecondDerivativesMatchFiniteDifferences) {
  const Tensor r = RandDouble({3, 2, 4}, 9);
  // first order: the fused backward kernel
  ExpectGradcheck([&](const TensorList& in) { return BatchNormTraining(in[0], in[1], in[2], 1e-3).y; },
                  {RandDouble({3, 2, 4}, 3), RandDouble({2}, 4), RandDouble({2}, 5)});
  ExpectGradcheck([&](const TensorList& in) { return BatchNormTraining(in[0], Tensor(), Tensor(), 1e-3).y; },
                  {RandDouble({3, 2, 4}, 6)});
  // second order (the composed create_graph backward): P = |dx|² + |dw|² for (dx, dw) the gradient of
  // <y, r>; its gradient in x and w against central differences of P.
  Tensor x = RandDouble({3, 2, 4}, 7), w = RandDouble({2}, 8);
  x.set_requires_grad(true), w.set_requires_grad(true);
  auto penalty = [&](bool create_graph) {
    const Tensor s = Sum(Mul(BatchNormTraining(x, w, Tensor(), 1e-3).y, r));
    const TensorList g = Grad({s}, {x, w}, {}, false, false, create_graph);
    return Add(Sum(Mul(g[0], g[0])), Sum(Mul(g[1], g[1])));
  };
  Backward(penalty(true));
  for (Tensor t : {x, w}) {
    const std::vector<double> analytic = t.grad().ToDoubleVector();
    double* p = static_cast<double*>(t.raw_data());
    for (int64_t i : {int64_t{0}, t.numel() / 2, t.numel() - 1}) {
      const double keep = p[i];
      p[i] = keep + 1e-6;
      const double up = penalty(false).item<double>();
      p[i] = keep - 1e-6;
      const double down = penalty(false).item<double>();
      p[i] = keep;
      EXPECT_NEAR(analytic[static_cast<size_t>(i)], (up - down) / 2e-6, 1e-5 * (1 + std::abs(analytic[static_cast<size_t>(i)])))
          << ShapeStr(t.sizes()) << " entry " << i;
    }
  }
}

// bfloat16 activations with float32 parameters (torch's mixed batch norm, autocast's CNNs): y and dx
// rounded once to bf16 from the float64 results on the same (bf16) values; mean, var, dw, db in float32.
// The create_graph (composed) backward gives the same gradients in the same dtypes.
TEST(BatchNormTest, Bfloat16InputWithFloat32ParametersMatchesFloat64UpToOneRounding) {
  const Tensor x = Cast(RandDouble({4, 3, 5, 2}, 21), DType::kBFloat16);
  const Tensor g = Cast(RandDouble({4, 3, 5, 2}, 22), DType::kBFloat16);
  const Tensor w32 = Cast(RandDouble({3}, 23), DType::kFloat32), b32 = Cast(RandDouble({3}, 24), DType::kFloat32);
  Tensor xs[2] = {Cast(x, DType::kFloat64), x}, ws[2] = {Cast(w32, DType::kFloat64), w32};
  Tensor bs[2] = {Cast(b32, DType::kFloat64), b32};
  BatchNormResult r[2];
  for (int k = 0; k < 2; ++k) {
    for (Tensor* t : {&xs[k], &ws[k], &bs[k]}) t->set_requires_grad(true);
    r[k] = BatchNormTraining(xs[k], ws[k], bs[k], 1e-5);
    Backward(r[k].y, k == 0 ? Cast(g, DType::kFloat64) : g);
  }
  EXPECT_EQ(r[1].y.dtype(), DType::kBFloat16);
  EXPECT_EQ(r[1].mean.dtype(), DType::kFloat32);
  EXPECT_EQ(xs[1].grad().dtype(), DType::kBFloat16);
  EXPECT_EQ(ws[1].grad().dtype(), DType::kFloat32);
  constexpr double kBf16 = 1.01 / 256;  // one rounding to bf16, relative
  ExpectAllClose(r[1].y, r[0].y.ToDoubleVector(), 1e-6, kBf16);
  ExpectAllClose(r[1].mean, r[0].mean.ToDoubleVector(), 1e-6, 1e-6);
  ExpectAllClose(r[1].var, r[0].var.ToDoubleVector(), 1e-6, 1e-6);
  ExpectAllClose(xs[1].grad(), xs[0].grad().ToDoubleVector(), 1e-5, kBf16);
  ExpectAllClose(ws[1].grad(), ws[0].grad().ToDoubleVector(), 1e-5, 1e-5);
  ExpectAllClose(bs[1].grad(), bs[0].grad().ToDoubleVector(), 1e-5, 1e-5);
  // the composed (create_graph) backward
  const TensorList composed = Grad({BatchNormTraining(xs[1], ws[1], bs[1], 1e-5).y}, {xs[1], ws[1]}, {g}, false,
                                   false, /*create_graph=*/true);
  EXPECT_EQ(composed[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(composed[1].dtype(), DType::kFloat32);
  ExpectAllClose(composed[0], xs[0].grad().ToDoubleVector(), 1e-5, 2 * kBf16);
  ExpectAllClose(composed[1], ws[0].grad().ToDoubleVector(), 1e-4, 1e-4);
}

// float32 inputs sum the forward's statistics in float32 blocks (batch_norm.cc, SumOf) about the
// channel's first value. Channels centred far from 0 (1000 + 0.01·wave: the mean 1e5 times the spread)
// and rows longer than one block (s = 700: two full blocks and a tail) still match the float64 loops on
// the same float32 values: the mean within its float32 rounding, the variance within 1e-5. y = x·scale +
// shift (torch's form too) rounds x·scale, up to |x|/std·2^-24 (~1e-3 here): y is checked to 3 of those.
TEST(BatchNormTest, Float32StatisticsStayAccurateFarFromZero) {
  for (const Shape& shape : {Shape{6, 3, 700}, Shape{5, 2, 7, 9}}) {
    SCOPED_TRACE(ShapeStr(shape));
    const int64_t n = shape[0], c = shape[1], s = NumElements(shape) / (n * c);
    std::vector<double> xv(static_cast<size_t>(NumElements(shape)));
    for (size_t i = 0; i < xv.size(); ++i) {
      const double ch = static_cast<double>((static_cast<int64_t>(i) / s) % c);
      xv[i] = static_cast<float>(1000.0 * (1 + ch) + 0.01 * std::sin(0.37 * static_cast<double>(i)) * (1 + ch));
    }
    const Tensor x = FromDoubles(xv, shape, DType::kFloat32);
    const auto [y, mean, var] = BatchNormTraining(x, Tensor(), Tensor(), 1e-12);
    const LoopResult want = LoopBatchNorm(xv, shape, {}, {}, 1e-12);
    double y_bound = 0;
    for (size_t k = 0; k < xv.size(); ++k) {
      const int64_t ch = (static_cast<int64_t>(k) / s) % c;
      y_bound = std::max(y_bound, 3 * std::ldexp(std::abs(xv[k]) / std::sqrt(want.var[static_cast<size_t>(ch)]), -24));
    }
    ExpectAllClose(y, want.y, y_bound, 0);
    ExpectAllClose(mean, want.mean, 0, 1e-7);
    ExpectAllClose(var, want.var, 0, 1e-5);
  }
}

TEST(BatchNormTest, ResultsDoNotDependOnTheThreadCount) {
  Tensor x = RandDouble({8, 5, 6, 6}, 11);
  std::vector<std::vector<double>> ys;
  for (int threads : {1, 2, 3}) {
    NumThreadsGuard guard(threads);
    ys.push_back(BatchNormTraining(Cast(x, DType::kFloat32), Tensor(), Tensor(), 1e-5).y.ToDoubleVector());
  }
  EXPECT_EQ(ys[1], ys[0]);
  EXPECT_EQ(ys[2], ys[0]);
}

TEST(BatchNormTest, Errors) {
  ExpectErrorContains([] { BatchNormTraining(RandDouble({1, 3}, 1), Tensor(), Tensor(), 1e-5); },
                      ErrorCode::kInvalidArgument, {"expected more than 1 value per channel when training", "[1, 3]"});
  ExpectErrorContains([] { BatchNormTraining(RandDouble({2, 3}, 1), RandDouble({4}, 2), Tensor(), 1e-5); },
                      ErrorCode::kInvalidArgument, {"weight must be [3]", "got [4]"});
  ExpectErrorContains([] { BatchNormTraining(RandDouble({4}, 1), Tensor(), Tensor(), 1e-5); },
                      ErrorCode::kInvalidArgument, {"expected an input [N, C, *]"});
  ExpectErrorContains(
      [] {
        BatchNormTraining(Cast(RandDouble({2, 3}, 1), DType::kBFloat16), Cast(RandDouble({3}, 2), DType::kBFloat16),
                          Tensor(), 1e-5);
      },
      ErrorCode::kInvalidArgument, {"weight must be [3] float32 for bfloat16 input", "got [3] bfloat16"});
}

}  // namespace
}  // namespace tessel
