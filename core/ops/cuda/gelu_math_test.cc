// core/ops/cuda/gelu_math_test.cc — the CUDA gelu kernel's element formulas (cuda/gelu_math.h), on the
// host, equal the CPU ops "gelu" and "gelu_backward" for both approximations over [-8, 8] in float32
// (1e-5 relative + 1e-6 absolute; the gradient 1e-5 absolute: Φ(x) = ½(1 + erf) cancels in fp32 in the
// left tail, differently for Eigen's vectorized erf and libm's) and bfloat16 (one bf16 ulp).
#include "core/ops/cuda/gelu_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/bf16.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

double Round(float v, DType dtype) { return dtype == DType::kBFloat16 ? Bf16ToFloat(FloatToBf16(v)) : v; }

TEST(GeluMathTest, ForwardAndGradEqualCpuForBothApproximations) {
  std::vector<double> xs, gs;
  for (int i = 0; i <= 1600; ++i) {
    xs.push_back(-8.0 + i * 0.01);
    gs.push_back(std::cos(0.37 * i));
  }
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Shape shape = {1601};
    const Tensor x = FromDoubles(xs, shape, dtype), g = FromDoubles(gs, shape, dtype);
    const std::vector<double> xv = x.ToDoubleVector(), gv = g.ToDoubleVector();  // the values as stored
    for (const std::string approx : {"none", "tanh"}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + approx);
      const bool th = approx == "tanh";
      const std::vector<double> y = Gelu(x, approx).ToDoubleVector();
      const std::vector<double> dx =
          Dispatch(GetOp("gelu_backward"), std::vector<Tensor>{g, x}, Attrs().Set("approximate", approx))[0]
              .ToDoubleVector();
      const double rel = dtype == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
      for (size_t i = 0; i < xv.size(); ++i) {
        const float xi = static_cast<float>(xv[i]), gi = static_cast<float>(gv[i]);
        ASSERT_NEAR(Round(GeluOut(xi, th), dtype), y[i], rel * std::abs(y[i]) + 1e-6) << xi;
        ASSERT_NEAR(Round(GeluGrad(gi, xi, th), dtype), dx[i], rel * std::abs(dx[i]) + 1e-5) << xi;
      }
    }
  }
}

}  // namespace
}  // namespace tessel::cuda
