// core/ops/testing/gradcheck.cc — finite-difference gradient checks.
#include "core/ops/testing/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::testing {
namespace {

Tensor CloneLeaf(const Tensor& t) {
  Tensor c = Empty(t.sizes(), t.dtype(), t.device());
  CopyInto(c, t);
  return c;
}

double Objective(const std::function<Tensor(const TensorList&)>& f, const TensorList& in,
                 const std::vector<double>& w) {
  NoGradGuard g;
  const std::vector<double> y = f(in).ToDoubleVector();
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
  return s;
}

}  // namespace

Tensor RandDouble(std::initializer_list<int64_t> shape, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  return Random(std::vector<int64_t>(shape), gen, Distribution::Uniform(lo, hi), DType::kFloat64);
}

void ExpectGradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                     GradcheckOptions o) {
  TensorList leaves;
  for (const Tensor& t : inputs) {
    Tensor c = t.defined() ? CloneLeaf(t) : Tensor();
    if (c.defined() && IsFloating(c.dtype())) c.set_requires_grad(true);
    leaves.push_back(c);
  }
  Tensor y = f(leaves);
  Generator gen(12345);
  Tensor w = Random(y.sizes(), gen, Distribution::Uniform(0.5, 1.5), y.dtype());
  const std::vector<double> wv = w.ToDoubleVector();
  ASSERT_TRUE(y.requires_grad()) << "output does not require grad";
  Backward(y, w);
  for (size_t k = 0; k < leaves.size(); ++k) {
    if (!leaves[k].defined() || !IsFloating(leaves[k].dtype())) continue;
    SCOPED_TRACE(::testing::Message() << "input " << k << " shape " << ShapeStr(leaves[k].sizes()));
    Tensor grad = leaves[k].grad();
    std::vector<double> analytic =
        grad.defined() ? grad.ToDoubleVector() : std::vector<double>(leaves[k].numel(), 0.0);
    TensorList probe;
    for (const Tensor& t : leaves) probe.push_back(t.defined() ? Detach(t) : Tensor());
    Tensor x = CloneLeaf(leaves[k]);
    probe[k] = x;
    ASSERT_EQ(x.dtype(), DType::kFloat64) << "gradcheck needs float64 inputs";
    double* p = x.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + o.eps;
      const double plus = Objective(f, probe, wv);
      p[i] = orig - o.eps;
      const double minus = Objective(f, probe, wv);
      p[i] = orig;
      const double numeric = (plus - minus) / (2 * o.eps);
      EXPECT_NEAR(analytic[i], numeric, o.atol + o.rtol * std::abs(numeric)) << "element " << i;
    }
  }
}

void ExpectAllClose(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol) {
  const std::vector<double> a = actual.ToDoubleVector();
  ASSERT_EQ(a.size(), expected.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << "element " << i;
      continue;
    }
    if (std::isinf(expected[i])) {
      EXPECT_EQ(a[i], expected[i]) << "element " << i;
      continue;
    }
    EXPECT_NEAR(a[i], expected[i], atol + rtol * std::abs(expected[i])) << "element " << i;
  }
}

void ExpectAllClose(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  ExpectAllClose(actual, expected.ToDoubleVector(), atol, rtol);
}

}  // namespace tessel::testing
