// core/ops/higher_order_test.cc — create_graph (core/autograd/engine.h): second derivatives of the
// pointwise ops against closed forms, a Hessian-vector product of a small MLP and a gradient penalty
// against finite differences of the first gradient (float64), the fused attention's second derivatives,
// and the error for an op whose backward is not differentiable.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/ops/attention.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::RandDouble;

double Sigm(double x) { return 1 / (1 + std::exp(-x)); }
double Phi(double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); }

struct Case {
  const char* name;
  std::function<Tensor(const Tensor&)> f;
  std::function<double(double)> second;  // f''
  bool positive = false;
};

TEST(HigherOrderTest, SecondDerivativesOfPointwiseOpsMatchClosedForms) {
  const std::vector<Case> cases = {
      {"exp", [](const Tensor& x) { return Exp(x); }, [](double x) { return std::exp(x); }},
      {"tanh", [](const Tensor& x) { return Tanh(x); },
       [](double x) { return -2 * std::tanh(x) * (1 - std::tanh(x) * std::tanh(x)); }},
      {"sigmoid", [](const Tensor& x) { return Sigmoid(x); },
       [](double x) { return Sigm(x) * (1 - Sigm(x)) * (1 - 2 * Sigm(x)); }},
      {"sin", [](const Tensor& x) { return Sin(x); }, [](double x) { return -std::sin(x); }},
      {"cos", [](const Tensor& x) { return Cos(x); }, [](double x) { return -std::cos(x); }},
      {"sqrt", [](const Tensor& x) { return Sqrt(x); }, [](double x) { return -0.25 * std::pow(x, -1.5); }, true},
      {"log", [](const Tensor& x) { return Log(x); }, [](double x) { return -1 / (x * x); }, true},
      {"pow3", [](const Tensor& x) { return Pow(x, 3.0); }, [](double x) { return 6 * x; }},
      {"relu", [](const Tensor& x) { return Relu(x); }, [](double) { return 0.0; }},
      {"gelu", [](const Tensor& x) { return Gelu(x); }, [](double x) { return Phi(x) * (2 - x * x); }},
      {"gelu_tanh", [](const Tensor& x) { return Gelu(x, "tanh"); },
       [](double x) {  // differentiated by hand from 0.5 x (1 + tanh(b (x + k x^3)))
         const double b = std::sqrt(2 / M_PI), k = 0.044715, t = std::tanh(b * (x + k * x * x * x));
         const double du = b * (1 + 3 * k * x * x), ddu = 6 * b * k * x;
         return (1 - t * t) * du - x * t * (1 - t * t) * du * du + 0.5 * x * (1 - t * t) * ddu;
       }},
      {"silu", [](const Tensor& x) { return Silu(x); },
       [](double x) { return Sigm(x) * (1 - Sigm(x)) * (2 + x * (1 - 2 * Sigm(x))); }},
      {"abs", [](const Tensor& x) { return Abs(x); }, [](double) { return 0.0; }},
      {"erf", [](const Tensor& x) { return Erf(x); },
       [](double x) { return -4 * x / std::sqrt(M_PI) * std::exp(-x * x); }},
      {"expm1", [](const Tensor& x) { return Expm1(x); }, [](double x) { return std::exp(x); }},
      {"mean_square", [](const Tensor& x) { return Mean(Mul(x, x), {1}, true); }, [](double) { return 2.0 / 5; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = RandDouble({3, 5}, 4, c.positive ? 0.3 : -2.0, 2.0);
    x.set_requires_grad(true);
    const Tensor g = Grad({Sum(c.f(x))}, {x}, {}, /*retain_graph=*/false, false, /*create_graph=*/true)[0];
    ASSERT_TRUE(g.requires_grad());  // the first gradient carries its own graph
    const Tensor g2 = Grad({Sum(g)}, {x})[0];  // the diagonal of the Hessian: f''(x) elementwise
    std::vector<double> want;
    for (double v : x.ToDoubleVector()) want.push_back(c.second(v));
    ExpectAllClose(g2, want, 1e-12, 1e-10);
  }
}

// loss(w1, w2) = sum((tanh(x w1) w2)^2) / n, a two-layer MLP.
Tensor MlpLoss(const Tensor& x, const Tensor& w1, const Tensor& w2) {
  const Tensor y = Matmul(Tanh(Matmul(x, w1)), w2);
  return Mean(Mul(y, y));
}

TensorList Gradients(const Tensor& x, const Tensor& w1, const Tensor& w2) {
  Tensor a = Detach(w1), b = Detach(w2);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  return Grad({MlpLoss(x, a, b)}, {a, b});
}

TEST(HigherOrderTest, HessianVectorProductOfAnMlpMatchesFiniteDifferencesOfTheGradient) {
  const Tensor x = RandDouble({5, 4}, 1);
  Tensor w1 = RandDouble({4, 3}, 2), w2 = RandDouble({3, 2}, 3);
  const Tensor v1 = RandDouble({4, 3}, 5), v2 = RandDouble({3, 2}, 6);
  w1.set_requires_grad(true);
  w2.set_requires_grad(true);
  const TensorList g = Grad({MlpLoss(x, w1, w2)}, {w1, w2}, {}, false, false, /*create_graph=*/true);
  const Tensor gv = Add(Sum(Mul(g[0], v1)), Sum(Mul(g[1], v2)));
  const TensorList hv = Grad({gv}, {w1, w2});
  // H v = (grad(w + e v) - grad(w - e v)) / 2e.
  const double e = 1e-5;
  const TensorList plus = Gradients(x, Add(w1, MulScalar(v1, e)), Add(w2, MulScalar(v2, e)));
  const TensorList minus = Gradients(x, Sub(w1, MulScalar(v1, e)), Sub(w2, MulScalar(v2, e)));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    ExpectAllClose(hv[i], MulScalar(Sub(plus[i], minus[i]), 1 / (2 * e)), 1e-8, 1e-6);
  }
}

// H v for f at x, by create_graph, against central differences of the gradient.
void ExpectHvpMatchesFiniteDifferences(const std::function<Tensor(const Tensor&)>& f, const Tensor& x0, const Tensor& v) {
  auto grad_at = [&](const Tensor& at, bool create) {
    Tensor x = Detach(at);
    x.set_requires_grad(true);
    const Tensor g = Grad({f(x)}, {x}, {}, false, false, create)[0];
    return std::make_pair(x, g);
  };
  auto [x, g] = grad_at(x0, true);
  const Tensor hv = Grad({Sum(Mul(g, v))}, {x})[0];
  const double e = 1e-5;
  const Tensor fd = MulScalar(Sub(grad_at(Add(x0, MulScalar(v, e)), false).second,
                                  grad_at(Sub(x0, MulScalar(v, e)), false).second), 1 / (2 * e));
  ExpectAllClose(hv, fd, 1e-8, 1e-6);
}

TEST(HigherOrderTest, SoftmaxAndLogSoftmaxHaveSecondDerivatives) {
  const Tensor c = RandDouble({3, 5}, 12);
  for (int64_t dim : {1, 0, -1}) {
    SCOPED_TRACE(dim);
    ExpectHvpMatchesFiniteDifferences([&](const Tensor& x) { return Sum(Mul(Softmax(x, dim), c)); },
                                      RandDouble({3, 5}, 13, -2, 2), RandDouble({3, 5}, 14));
    // A classifier's loss: -sum(c * log_softmax(x)), and its square (the first gradient feeds the second).
    ExpectHvpMatchesFiniteDifferences([&](const Tensor& x) { return Neg(Sum(Mul(LogSoftmax(x, dim), c))); },
                                      RandDouble({3, 5}, 15, -2, 2), RandDouble({3, 5}, 16));
    ExpectHvpMatchesFiniteDifferences(
        [&](const Tensor& x) {
          const Tensor l = Sum(Mul(LogSoftmax(x, dim), c));
          return Mul(l, l);
        },
        RandDouble({3, 5}, 17, -2, 2), RandDouble({3, 5}, 18));
  }
}

TEST(HigherOrderTest, LayerNormAndRmsNormHaveSecondDerivativesInTheInputAndTheWeights) {
  const Tensor w = RandDouble({5}, 23, 0.5, 1.5), b = RandDouble({5}, 24), c = RandDouble({3, 5}, 25);
  auto square = [](const Tensor& t) { return Sum(Mul(t, t)); };
  // In x (the weights fixed), and in the weight (x fixed): the loss squared couples the rows.
  ExpectHvpMatchesFiniteDifferences([&](const Tensor& x) { return square(Mul(LayerNorm(x, w, b, 1e-5), c)); },
                                    RandDouble({3, 5}, 26, -2, 2), RandDouble({3, 5}, 27));
  ExpectHvpMatchesFiniteDifferences([&](const Tensor& x) { return square(Mul(RmsNorm(x, w, 1e-6), c)); },
                                    RandDouble({3, 5}, 28, -2, 2), RandDouble({3, 5}, 29));
  const Tensor x = RandDouble({3, 5}, 30, -2, 2);
  ExpectHvpMatchesFiniteDifferences([&](const Tensor& v) { return square(Mul(LayerNorm(x, v, b, 1e-5), c)); },
                                    w, RandDouble({5}, 31));
  // The composed first gradient (create_graph) equals the fused kernel's.
  Tensor xr = Detach(x), wr = Detach(w), br = Detach(b);
  for (Tensor* t : {&xr, &wr, &br}) t->set_requires_grad(true);
  const TensorList fused = Grad({square(Mul(LayerNorm(xr, wr, br, 1e-5), c))}, {xr, wr, br});
  const TensorList composed =
      Grad({square(Mul(LayerNorm(xr, wr, br, 1e-5), c))}, {xr, wr, br}, {}, false, false, /*create_graph=*/true);
  for (int i = 0; i < 3; ++i) ExpectAllClose(composed[i], fused[i], 1e-12, 1e-10);
}

TEST(HigherOrderTest, MaxAlongADimHasSecondDerivatives) {
  for (bool keepdim : {false, true}) {
    SCOPED_TRACE(keepdim);
    ExpectHvpMatchesFiniteDifferences(
        [&](const Tensor& x) {
          const Tensor m = Max(x, 1, keepdim).first;
          return Sum(Mul(Mul(m, m), m));
        },
        RandDouble({3, 5}, 34, -2, 2), RandDouble({3, 5}, 35));
  }
}

TEST(HigherOrderTest, CrossEntropyHasSecondDerivativesInEveryReduction) {
  // Targets with one ignored row; the loss squared makes the first gradient feed the second.
  const Tensor target = FromVector<int64_t>({2, -100, 0, 4}, {4});
  for (const char* reduction : {"mean", "sum", "none"}) {
    SCOPED_TRACE(reduction);
    auto loss = [&](const Tensor& x) {
      const Tensor l = CrossEntropy(x, target, -100, reduction);
      return Sum(Mul(l, l));
    };
    ExpectHvpMatchesFiniteDifferences(loss, RandDouble({4, 5}, 19, -2, 2), RandDouble({4, 5}, 20));
  }
  // Label smoothing composes with the same op.
  ExpectHvpMatchesFiniteDifferences(
      [&](const Tensor& x) {
        const Tensor l = CrossEntropy(x, target, -100, "mean", 0.1);
        return Mul(l, l);
      },
      RandDouble({4, 5}, 21, -2, 2), RandDouble({4, 5}, 22));
}

TEST(HigherOrderTest, GradientPenaltyFromBackwardCreateGraphMatchesFiniteDifferences) {
  // WGAN-GP's shape: the penalty is the squared norm of the gradient with respect to the input, and its
  // gradient reaches the weights through that first gradient. .grad of a leaf keeps its graph.
  const Tensor w1 = RandDouble({4, 3}, 7), w2 = RandDouble({3, 2}, 8);
  const Tensor x0 = RandDouble({5, 4}, 9);
  auto penalty = [&](const Tensor& a, const Tensor& b, bool create) {
    Tensor x = Detach(x0);
    x.set_requires_grad(true);
    Backward(MlpLoss(x, a, b), Tensor(), false, create);
    const Tensor gx = x.grad();
    return Sum(Mul(gx, gx));
  };
  Tensor a = Detach(w1);
  a.set_requires_grad(true);
  const Tensor p = penalty(a, w2, true);
  ASSERT_TRUE(p.requires_grad());
  const Tensor dp = Grad({p}, {a})[0];
  std::vector<double> fd;
  const std::vector<double> base = w1.ToDoubleVector();
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<double> hi = base, lo = base;
    hi[i] += 1e-5;
    lo[i] -= 1e-5;
    const double ph = penalty(FromVector<double>(hi, {4, 3}), w2, false).item<double>();
    const double pl = penalty(FromVector<double>(lo, {4, 3}), w2, false).item<double>();
    fd.push_back((ph - pl) / 2e-5);
  }
  ExpectAllClose(dp, fd, 1e-8, 1e-6);
}

TEST(HigherOrderTest, FusedAttentionHasSecondDerivativesInQueriesKeysAndValues) {
  // Under create_graph the fused op's backward is composed of differentiable ops (P recomputed from q and
  // k); its Hessian-vector products are checked against central differences of the fused kernel's own
  // first gradient. Causal with S > T (top-left aligned, as torch), and unmasked.
  auto square = [](const Tensor& t) { return Sum(Mul(t, t)); };
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal);
    const Tensor q = RandDouble({2, 3, 4}, 40, -1, 1), k = RandDouble({2, 5, 4}, 41, -1, 1);
    const Tensor v = RandDouble({2, 5, 3}, 42), c = RandDouble({2, 3, 3}, 43);
    ExpectHvpMatchesFiniteDifferences(
        [&](const Tensor& x) { return square(Mul(ScaledDotProductAttention(x, k, v, causal), c)); }, q,
        RandDouble({2, 3, 4}, 44));
    ExpectHvpMatchesFiniteDifferences(
        [&](const Tensor& x) { return square(Mul(ScaledDotProductAttention(q, x, v, causal), c)); }, k,
        RandDouble({2, 5, 4}, 45));
    ExpectHvpMatchesFiniteDifferences(
        [&](const Tensor& x) { return square(Mul(ScaledDotProductAttention(q, k, x, causal, 0.3), c)); }, v,
        RandDouble({2, 5, 3}, 46));
    // The composed first gradient (create_graph) equals the fused kernel's.
    Tensor qr = Detach(q), kr = Detach(k), vr = Detach(v);
    for (Tensor* t : {&qr, &kr, &vr}) t->set_requires_grad(true);
    auto loss = [&] { return square(Mul(ScaledDotProductAttention(qr, kr, vr, causal), c)); };
    const TensorList fused = Grad({loss()}, {qr, kr, vr});
    const TensorList composed = Grad({loss()}, {qr, kr, vr}, {}, false, false, /*create_graph=*/true);
    for (int i = 0; i < 3; ++i) ExpectAllClose(composed[i], fused[i], 1e-12, 1e-10);
  }
}

// An op whose backward calls an op with no gradient of its own (what every fused backward once was).
TensorList Identity(std::span<const Tensor> in, const Attrs&) { return {Detach(in[0])}; }
const OpDef& kOpaqueBackward = RegisterOp({.name = "test_opaque_backward", .cpu = Identity});
const OpDef& kWithOpaqueBackward = RegisterOp(
    {.name = "test_with_opaque_backward", .cpu = Identity, .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kOpaqueBackward, {c.grad_outputs[0]}, Attrs())};
     }});

TEST(HigherOrderTest, AnOpWhoseBackwardIsNotDifferentiableRaisesNamingIt) {
  Tensor x = RandDouble({2, 3}, 10);
  x.set_requires_grad(true);
  const Tensor c = RandDouble({2, 3}, 11);
  tessel::testing::ExpectErrorContains(
      [&] {
        const Tensor y = autograd::CallOp1(kWithOpaqueBackward, {x}, Attrs());
        Grad({Sum(Mul(y, y))}, {x}, {}, false, false, /*create_graph=*/true);
      },
      ErrorCode::kUnimplemented, {"create_graph", "'test_opaque_backward'", "no gradient of its own"});
  // Without create_graph the same gradient is fine, and nothing records.
  const Tensor g = Grad({Sum(Mul(Softmax(x, 1), c))}, {x})[0];
  EXPECT_FALSE(g.requires_grad());
}

}  // namespace
}  // namespace tessel
