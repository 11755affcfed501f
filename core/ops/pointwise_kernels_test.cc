// Tests of the per-ISA float32 pointwise kernels (pointwise_kernels.h) against double-precision
// formulas, on lengths that are not multiples of either vector width, and through the gelu ops.
#include "core/ops/pointwise_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/ops/vector_isa.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr double kBeta = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kKappa = 0.044715;

double GeluRef(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + std::tanh(kBeta * (x + kKappa * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

double GeluGradRef(double x, bool tanh_form) {
  if (tanh_form) {
    const double th = std::tanh(kBeta * (x + kKappa * x * x * x));
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * kBeta * (1 + 3 * kKappa * x * x);
  }
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

// Inputs spanning both branches of every approximation: 0, the tanh form's tiny-argument branch,
// erf's ±4 clamp, tanh's ±8 clamp and large arguments where GELU is x or 0.
std::vector<float> Inputs(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  const float specials[] = {0.0f, 1e-5f, -3e-4f, 4.0f, -4.0f, 8.5f, -8.5f, 30.0f, -30.0f};
  for (int64_t i = 0; i < n; ++i) {
    x[static_cast<size_t>(i)] = i < 9 ? specials[i] : -10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(n);
  }
  return x;
}

std::vector<const PointwiseKernels*> Variants() {
  std::vector<const PointwiseKernels*> v{&Avx2PointwiseKernels()};
  if (CpuHasAvx512()) {
    v.push_back(&Avx512PointwiseKernels());
  } else {
    std::printf("this CPU lacks AVX-512 F, VL, DQ or BW: only the avx2 variant is tested here\n");
  }
  return v;
}

class PointwiseKernelsTest : public ::testing::TestWithParam<bool> {};  // tanh form?

TEST_P(PointwiseKernelsTest, GeluMatchesTheDoubleFormulaOnEveryIsaAndTail) {
  const bool tanh_form = GetParam();
  for (const PointwiseKernels* k : Variants()) {
    for (int64_t n : {1, 7, 9, 16, 33, 1001}) {
      const std::vector<float> x = Inputs(n);
      std::vector<float> y(x.size(), -1.0f);
      k->gelu(x.data(), y.data(), n, tanh_form);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = GeluRef(x[i], tanh_form);
        EXPECT_NEAR(y[i], ref, 2e-6 + 2e-6 * std::abs(ref)) << k->isa << " n " << n << " x " << x[i];
      }
    }
  }
}

TEST_P(PointwiseKernelsTest, GeluBackwardIsGradTimesTheDoubleDerivative) {
  const bool tanh_form = GetParam();
  for (const PointwiseKernels* k : Variants()) {
    const int64_t n = 45;
    const std::vector<float> x = Inputs(n);
    std::vector<float> g(x.size()), d(x.size());
    for (int64_t i = 0; i < n; ++i) g[i] = 0.5f + 0.25f * static_cast<float>(i % 5);
    k->gelu_backward(g.data(), x.data(), d.data(), n, tanh_form);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = g[i] * GeluGradRef(x[i], tanh_form);
      EXPECT_NEAR(d[i], ref, 3e-6 + 3e-6 * std::abs(ref)) << k->isa << " x " << x[i];
    }
  }
}

// Sharded and unsharded runs split a tensor at different offsets (ParallelFor chunks, batch shards):
// every element must come out bitwise the same whether it lands in a full vector or in a tail.
TEST_P(PointwiseKernelsTest, ResultsDoNotDependOnWhereTheRangeIsSplit) {
  const bool tanh_form = GetParam();
  for (const PointwiseKernels* k : Variants()) {
    const int64_t n = 301;
    const std::vector<float> x = Inputs(n);
    std::vector<float> whole(x.size()), pieces(x.size()), g(x.size(), 0.75f), dwhole(x.size()), dpieces(x.size());
    k->gelu(x.data(), whole.data(), n, tanh_form);
    k->gelu_backward(g.data(), x.data(), dwhole.data(), n, tanh_form);
    for (int64_t s = 0, len = 1; s < n; s += len, len = len % 23 + 3) {
      const int64_t m = std::min(len, n - s);
      k->gelu(x.data() + s, pieces.data() + s, m, tanh_form);
      k->gelu_backward(g.data() + s, x.data() + s, dpieces.data() + s, m, tanh_form);
    }
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(pieces[i], whole[i]) << k->isa << " i " << i << " x " << x[i];
      EXPECT_EQ(dpieces[i], dwhole[i]) << k->isa << " i " << i << " x " << x[i];
    }
  }
}

TEST_P(PointwiseKernelsTest, NanStaysNanAndOutputMayAliasInput) {
  const bool tanh_form = GetParam();
  for (const PointwiseKernels* k : Variants()) {
    std::vector<float> x = Inputs(19);
    x[11] = std::numeric_limits<float>::quiet_NaN();  // in a full vector
    x[18] = std::numeric_limits<float>::quiet_NaN();  // in every variant's tail
    std::vector<float> expected(x.size()), d(x.size()), g(x.size(), 1.0f);
    k->gelu(x.data(), expected.data(), 19, tanh_form);
    k->gelu_backward(g.data(), x.data(), d.data(), 19, tanh_form);
    EXPECT_TRUE(std::isnan(d[11]) && std::isnan(d[18])) << k->isa;
    k->gelu(x.data(), x.data(), 19, tanh_form);  // in place
    EXPECT_TRUE(std::isnan(x[11]) && std::isnan(x[18])) << k->isa;
    for (size_t i = 0; i < x.size(); ++i) {
      if (i != 11 && i != 18) EXPECT_EQ(x[i], expected[i]) << k->isa << " i " << i;
    }
  }
}

TEST_P(PointwiseKernelsTest, GeluOpsOnFloatTensorsMatchTheDoubleFormula) {
  const bool tanh_form = GetParam();
  const std::vector<float> x = Inputs(37);
  Tensor t = FromVector(x, {37});
  t.set_requires_grad(true);
  const Tensor out = Gelu(t, tanh_form ? "tanh" : "none");
  Backward(out, Ones({37}));  // d = gelu'(x)
  const std::vector<double> y = out.ToDoubleVector();
  const std::vector<double> d = t.grad().ToDoubleVector();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], GeluRef(x[i], tanh_form), 2e-6 + 2e-6 * std::abs(GeluRef(x[i], tanh_form))) << x[i];
    EXPECT_NEAR(d[i], GeluGradRef(x[i], tanh_form), 3e-6 + 3e-6 * std::abs(GeluGradRef(x[i], tanh_form))) << x[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, PointwiseKernelsTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Tanh" : "Erf"; });

// The exp kernel against Eigen's own packet exp (what the exp op and softmax computed before it), bit for bit
// wherever the result is a normal float; a ±inf, NaN or overflowing argument included. (Eigen itself took
// std::exp for the elements before its first aligned packet and after its last: the arrays here are aligned
// and a whole number of packets long, so every element below went through Eigen's packets.)
TEST(PointwiseExpTest, EqualsEigensPacketExpBitForBitOnEveryIsa) {
  std::vector<float> values;
  for (int i = 0; i < 200000; ++i) values.push_back(-90.0f + 180.0f * static_cast<float>(i) / 200000.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, 88.7f, 88.72f, 88.7228f, 88.723f, 89.0f, 1e30f, -87.33f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    values.push_back(v);
  }
  while (values.size() % 16 != 0) values.push_back(1.5f);
  const int64_t n = static_cast<int64_t>(values.size());
  const Eigen::ArrayXf x = Eigen::Map<const Eigen::ArrayXf>(values.data(), n);  // Eigen's aligned storage
  for (float offset : {0.0f, 3.25f}) {
    const Eigen::ArrayXf want = (x - offset).exp();
    std::vector<const PointwiseKernels*> copies{&Avx2PointwiseKernels()};
    if (CpuHasAvx512()) copies.push_back(&Avx512PointwiseKernels());
    for (const PointwiseKernels* k : copies) {
      std::vector<float> got(n), shifted(n + 3);
      k->exp(x.data(), offset, got.data(), n);
      k->exp(x.data() + 3, offset, shifted.data(), n - 3);  // each element's value, wherever a range starts
      for (int64_t i = 3; i < n; ++i) ASSERT_EQ(std::memcmp(&shifted[i - 3], &got[i], 4), 0) << "element " << i;
      int compared = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << k->isa << " x " << x[i];
          continue;
        }
        if (want[i] < std::numeric_limits<float>::min()) continue;  // the caller's (exact_math.h)
        ASSERT_EQ(got[i], want[i]) << k->isa << " x " << x[i] << " offset " << offset;
        ++compared;
      }
      EXPECT_GT(compared, 190000) << k->isa;
    }
  }
}

// sigmoid and silu against Eigen's expressions (the float32 ops' code before the kernels), bit for bit.
TEST(PointwiseExpTest, SigmoidAndSiluEqualEigensExpressionsBitForBit) {
  const int64_t n = 64000;
  Eigen::ArrayXf x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -100.0f + 200.0f * static_cast<float>(i) / static_cast<float>(n);
  x[0] = std::numeric_limits<float>::infinity(), x[1] = -std::numeric_limits<float>::infinity();
  x[2] = std::numeric_limits<float>::quiet_NaN(), x[3] = 0.0f;
  const Eigen::ArrayXf sig = (1.0f + (-x).exp()).inverse(), silu = x / (1.0f + (-x).exp());
  std::vector<const PointwiseKernels*> copies{&Avx2PointwiseKernels()};
  if (CpuHasAvx512()) copies.push_back(&Avx512PointwiseKernels());
  for (const PointwiseKernels* k : copies) {
    std::vector<float> a(n), b(n);
    k->sigmoid(x.data(), a.data(), n, false);
    k->sigmoid(x.data(), b.data(), n, true);
    ASSERT_TRUE(std::isnan(a[2]) && std::isnan(b[2])) << k->isa;  // (NaN's sign bit is not compared)
    for (int64_t i : {int64_t{0}, int64_t{1}}) {
      ASSERT_EQ(a[i], sig[i]) << k->isa;
      ASSERT_TRUE(b[i] == silu[i] || (std::isnan(b[i]) && std::isnan(silu[i]))) << k->isa;  // silu(-inf): NaN
    }
    for (int64_t i = 3; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&a[i], &sig[i], 4), 0) << k->isa << " sigmoid x " << x[i] << ": " << a[i];
      ASSERT_EQ(std::memcmp(&b[i], &silu[i], 4), 0) << k->isa << " silu x " << x[i] << ": " << b[i];
    }
  }
}

TEST(PointwiseIsaTest, ForcingPicksTheVariantAndAvx512NeedsTheCpu) {
  ForceVectorIsaForTesting(VectorIsa::kAvx2);
  EXPECT_STREQ(ActivePointwiseKernels().isa, "avx2");
  if (CpuHasAvx512()) {
    ForceVectorIsaForTesting(VectorIsa::kAvx512);
    EXPECT_STREQ(ActivePointwiseKernels().isa, "avx512");
  } else {
    testing::ExpectErrorContains([] { ForceVectorIsaForTesting(VectorIsa::kAvx512); },
                                 ErrorCode::kFailedPrecondition, "no AVX-512F");
  }
  ForceVectorIsaForTesting(VectorIsa::kAuto);
  EXPECT_STREQ(ActivePointwiseKernels().isa, CpuHasAvx512() ? "avx512" : "avx2");
}

}  // namespace
}  // namespace tessel
