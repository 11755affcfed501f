// core/ops/unary_pointwise_cuda_test.cc — neg, exp, log, sqrt, rsqrt, pow, tanh, sigmoid, relu, silu, abs
// and clamp on a GPU equal the CPU ops (float32: 1e-5 relative; bfloat16: one bf16 ulp) on a transposed
// input, and gradients through each (their fused backward ops on the GPU) equal the CPU's; an int64 input
// fails with kUnimplemented naming the op. Skips without a GPU. Passed on an H200 on 2026-12-04
// (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class UnaryPointwiseCudaTest : public memory::testing::GpuTest {};

const Device kGpu = Device::Cuda(0);

void ExpectClose(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<double> g = got.To(Device::Cpu()).ToDoubleVector(), w = want.ToDoubleVector();
  ASSERT_EQ(g.size(), w.size()) << what;
  const double rel = want.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " " << i;
    } else {
      EXPECT_NEAR(g[i], w[i], rel * std::abs(w[i]) + 1e-6) << what << " " << i;
    }
  }
}

const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>& Ops() {
  static const auto* ops = new std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
      {"neg", [](const Tensor& x) { return Neg(x); }},
      {"exp", [](const Tensor& x) { return Exp(x); }},
      {"log", [](const Tensor& x) { return Log(Abs(x)); }},
      {"sqrt", [](const Tensor& x) { return Sqrt(Abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return Rsqrt(Abs(x)); }},
      {"pow", [](const Tensor& x) { return Pow(Abs(x), 1.7); }},
      {"tanh", [](const Tensor& x) { return Tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return Sigmoid(x); }},
      {"relu", [](const Tensor& x) { return Relu(x); }},
      {"silu", [](const Tensor& x) { return Silu(x); }},
      {"abs", [](const Tensor& x) { return Abs(x); }},
      {"clamp", [](const Tensor& x) { return Clamp(x, -1.0, 0.5); }},
      {"sin", [](const Tensor& x) { return Sin(x); }},
      {"cos", [](const Tensor& x) { return Cos(x); }},
      {"erf", [](const Tensor& x) { return Erf(x); }},
      {"log1p", [](const Tensor& x) { return Log1p(Abs(x)); }},
      {"expm1", [](const Tensor& x) { return Expm1(x); }},
      {"exp2", [](const Tensor& x) { return Exp2(x); }},
      {"floor", [](const Tensor& x) { return Floor(x); }},
      {"ceil", [](const Tensor& x) { return Ceil(x); }},
      {"round", [](const Tensor& x) { return Round(x); }},
  };
  return *ops;
}

TEST_F(UnaryPointwiseCudaTest, ForwardEqualsCpuOnATransposedInput) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor base = cuda::testing::Wave({7, 9}, dtype, 1, 2.0);
    const Tensor x = MakeView(base, {9, 7}, {1, 9}, 0);
    const Tensor gx = MakeView(base.To(kGpu), {9, 7}, {1, 9}, 0);
    for (const auto& [name, f] : Ops()) ExpectClose(f(gx), f(x), name + " " + std::string(DTypeName(dtype)));
  }
}

TEST_F(UnaryPointwiseCudaTest, GradientsThroughEachOpEqualCpu) {
  for (const auto& [name, f] : Ops()) {
    Tensor x = cuda::testing::Wave({5, 6}, DType::kFloat32, 2, 2.0), gx = x.To(kGpu);
    x.set_requires_grad(true);
    gx.set_requires_grad(true);
    Backward(Sum(f(x)));
    Backward(Sum(f(gx)));
    ExpectClose(gx.grad(), x.grad(), name + " grad");
  }
}

TEST_F(UnaryPointwiseCudaTest, IntegerInputFailsNamingTheOp) {
  testing::ExpectErrorContains([] { Exp(Zeros({3}, DType::kInt64, kGpu)); }, ErrorCode::kUnimplemented,
                               "exp: the CUDA kernel supports float32 and bfloat16");
}

}  // namespace
}  // namespace tessel
