// core/ops/cuda/pointwise_math_test.cc — the CUDA unary pointwise formulas (cuda/pointwise_math.h), run on
// the host on float32 and bfloat16 values (negative, positive, NaN, ±inf), against the CPU ops: neg, abs,
// relu, clamp, sqrt, rsqrt, pow by 2 / 3 / ±0.5 / -1 / -2 and the threshold / abs / clamp gradients bit for
// bit (but bf16 x ** 3 and x ** -2: one rounding on the GPU, two on the CPU, as torch's kernels); exp, log,
// general pow, tanh, sigmoid, silu and the tanh / sigmoid / silu gradients within 4 float32 ulps or one bf16
// ulp (libm against Eigen's fast vectorized functions).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/pointwise_math.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

std::vector<double> Inputs(bool positive) {
  std::vector<double> v = testing::Wave({64}, DType::kFloat32, 1, 4.0).ToDoubleVector();
  if (positive) {
    for (double& x : v) x = std::abs(x) + 0.01;
  }
  v.push_back(std::nan(""));
  v.push_back(std::numeric_limits<double>::infinity());
  v.push_back(-std::numeric_limits<double>::infinity());
  v.push_back(0.0);
  v.push_back(-1.5);
  return v;
}

// got equals want where both are NaN or bit-equal after rounding to dtype; else within `ulps` of want.
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, DType dtype, int ulps,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
      continue;
    }
    if (std::isinf(want[i]) || ulps == 0) {
      EXPECT_EQ(got[i], want[i]) << what << " element " << i;
      continue;
    }
    const double ulp = dtype == DType::kFloat32 ? std::ldexp(1.0, std::ilogb(want[i]) - 23)
                                                : std::ldexp(1.0, std::ilogb(want[i]) - 7);
    const double tol = (dtype == DType::kFloat32 ? ulps : 1) * (want[i] == 0 ? 1e-38 : ulp);
    EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
  }
}

// The kernel's value for x stored in dtype: widen (bf16 exact), compute in float32, round once.
double Stored(float v, DType dtype) { return dtype == DType::kFloat32 ? v : Bf16ToFloat(FloatToBf16(v)); }

struct Case {
  PointwiseOp op;
  const char* name;
  PointwiseParams p;
  bool positive;
  int ulps;  // 0: bitwise
  Tensor (*cpu)(const Tensor&);
};

TEST(PointwiseMathTest, ForwardFormulasMatchTheCpuOps) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {PointwiseOp::kNeg, "neg", {}, false, 0, [](const Tensor& x) { return Neg(x); }},
      {PointwiseOp::kAbs, "abs", {}, false, 0, [](const Tensor& x) { return Abs(x); }},
      {PointwiseOp::kRelu, "relu", {}, false, 0, [](const Tensor& x) { return Relu(x); }},
      {PointwiseOp::kClamp, "clamp", {1, -1.25f, 2.5f}, false, 0,
       [](const Tensor& x) { return Clamp(x, -1.25, 2.5); }},
      {PointwiseOp::kClamp, "clamp max", {1, -inf, 0.5f}, false, 0,
       [](const Tensor& x) { return Clamp(x, std::nullopt, 0.5); }},
      {PointwiseOp::kSqrt, "sqrt", {}, true, 0, [](const Tensor& x) { return Sqrt(x); }},
      {PointwiseOp::kPow, "pow 2", {2, 0, 0}, false, 0, [](const Tensor& x) { return Pow(x, 2.0); }},
      {PointwiseOp::kPow, "pow 3", {3, 0, 0}, false, 0, [](const Tensor& x) { return Pow(x, 3.0); }},
      {PointwiseOp::kPow, "pow 0.5", {0.5f, 0, 0}, true, 0, [](const Tensor& x) { return Pow(x, 0.5); }},
      {PointwiseOp::kPow, "pow -0.5", {-0.5f, 0, 0}, true, 0, [](const Tensor& x) { return Pow(x, -0.5); }},
      {PointwiseOp::kPow, "pow -1", {-1, 0, 0}, false, 0, [](const Tensor& x) { return Pow(x, -1.0); }},
      {PointwiseOp::kPow, "pow -2", {-2, 0, 0}, false, 0, [](const Tensor& x) { return Pow(x, -2.0); }},
      {PointwiseOp::kPow, "pow 1.7", {1.7f, 0, 0}, true, 4, [](const Tensor& x) { return Pow(x, 1.7); }},
      {PointwiseOp::kExp, "exp", {}, false, 4, [](const Tensor& x) { return Exp(x); }},
      {PointwiseOp::kLog, "log", {}, true, 4, [](const Tensor& x) { return Log(x); }},
      {PointwiseOp::kRsqrt, "rsqrt", {}, true, 0, [](const Tensor& x) { return Rsqrt(x); }},
      {PointwiseOp::kTanh, "tanh", {}, false, 4, [](const Tensor& x) { return Tanh(x); }},
      {PointwiseOp::kSigmoid, "sigmoid", {}, false, 4, [](const Tensor& x) { return Sigmoid(x); }},
      {PointwiseOp::kSilu, "silu", {}, false, 4, [](const Tensor& x) { return Silu(x); }},
      {PointwiseOp::kSin, "sin", {}, false, 4, [](const Tensor& x) { return Sin(x); }},
      {PointwiseOp::kCos, "cos", {}, false, 4, [](const Tensor& x) { return Cos(x); }},
      {PointwiseOp::kErf, "erf", {}, false, 4, [](const Tensor& x) { return Erf(x); }},
      {PointwiseOp::kLog1p, "log1p", {}, true, 4, [](const Tensor& x) { return Log1p(x); }},
      {PointwiseOp::kExpm1, "expm1", {}, false, 4, [](const Tensor& x) { return Expm1(x); }},
      {PointwiseOp::kExp2, "exp2", {}, false, 4, [](const Tensor& x) { return Exp2(x); }},
      {PointwiseOp::kFloor, "floor", {}, false, 0, [](const Tensor& x) { return Floor(x); }},
      {PointwiseOp::kCeil, "ceil", {}, false, 0, [](const Tensor& x) { return Ceil(x); }},
      {PointwiseOp::kRound, "round", {}, false, 0, [](const Tensor& x) { return Round(x); }},
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const Case& c : cases) {
      const std::vector<double> in = Inputs(c.positive);
      const Tensor x = FromDoubles(in, std::vector<int64_t>{static_cast<int64_t>(in.size())}, dtype);
      const std::vector<double> xs = x.ToDoubleVector();
      std::vector<double> got;
      PointwiseParams p = c.p;
      if (c.op == PointwiseOp::kPow && dtype == DType::kBFloat16) {
        p.exponent = Bf16ToFloat(FloatToBf16(p.exponent));  // (torch's pow takes the exponent in the tensor's dtype)
      }
      for (double v : xs) got.push_back(Stored(ApplyPointwise(c.op, static_cast<float>(v), p), dtype));
      std::vector<double> want = c.cpu(x).ToDoubleVector();
      if (c.op == PointwiseOp::kPow && dtype == DType::kBFloat16 && (p.exponent == 3.0f || p.exponent == -2.0f)) {
        // the CPU op rounds bf16 x·x before the second op (torch's CPU kernel); the GPU formula rounds once
        // (torch's CUDA kernel): its reference is the value in double rounded once (x³ of a bf16 x is exact)
        for (size_t i = 0; i < xs.size(); ++i) {
          const double v = xs[i];
          want[i] = Stored(static_cast<float>(p.exponent == 3.0f ? v * v * v : 1.0 / (v * v)), dtype);
        }
      }
      ExpectClose(got, want, dtype, c.ulps, std::string(c.name) + " " + std::string(DTypeName(dtype)));
    }
  }
}

TEST(PointwiseMathTest, BackwardFormulasMatchTheCpuOps) {
  struct GradCase {
    PointwiseGradOp op;
    const char* name;
    Attrs attrs;
    PointwiseParams p;
    int ulps;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<GradCase> cases = {
      {PointwiseGradOp::kThreshold, "threshold_backward", Attrs().Set("threshold", 0.25), {1, 0.25f, inf}, 0},
      {PointwiseGradOp::kAbs, "abs_backward", Attrs(), {1, -inf, inf}, 0},
      {PointwiseGradOp::kClamp, "clamp_backward", Attrs().Set("min", -1.0).Set("max", 2.0), {1, -1, 2}, 0},
      {PointwiseGradOp::kTanh, "tanh_backward", Attrs(), {1, -inf, inf}, 4},
      {PointwiseGradOp::kSigmoid, "sigmoid_backward", Attrs(), {1, -inf, inf}, 4},
      {PointwiseGradOp::kSilu, "silu_backward", Attrs(), {1, -inf, inf}, 4},
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const std::vector<double> tv = Inputs(false);
    const int64_t n = static_cast<int64_t>(tv.size());
    const Tensor t = FromDoubles(tv, std::vector<int64_t>{n}, dtype);
    const Tensor g = testing::Wave({n}, dtype, 5, 2.0);
    for (const GradCase& c : cases) {
      const Tensor want = Dispatch(GetOp(c.name), std::vector<Tensor>{g, t}, c.attrs)[0];
      const std::vector<double> gs = g.ToDoubleVector(), ts = t.ToDoubleVector();
      std::vector<double> got;
      for (int64_t i = 0; i < n; ++i) {
        got.push_back(Stored(ApplyPointwiseGrad(c.op, static_cast<float>(gs[i]), static_cast<float>(ts[i]), c.p), dtype));
      }
      ExpectClose(got, want.ToDoubleVector(), dtype, c.ulps, std::string(c.name) + " " + std::string(DTypeName(dtype)));
    }
  }
}

}  // namespace
}  // namespace tessel::cuda
