// core/ops/optimizer_cuda_test.cc — the fused CUDA AdamW, and SGD with momentum (plain and nesterov), equal
// the CPU kernels over 3 steps (float32: 1e-6 relative; bfloat16: one bf16 rounding of the stored values).
// Skips without a GPU.
// Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/memory/testing/gpu_test.h"
#include "core/ops/optimizer.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

class OptimizerCudaTest : public memory::testing::GpuTest {};

TEST_F(OptimizerCudaTest, FusedAdamWEqualsCpu) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<double> p0(1000);
    for (size_t i = 0; i < p0.size(); ++i) p0[i] = std::sin(0.01 * i);
    const std::vector<int64_t> shape = {10, 100};
    Tensor p = FromDoubles(p0, shape, dtype), m = Zeros(shape, dtype), v = Zeros(shape, dtype);
    Tensor gp = p.To(gpu), gm = m.To(gpu), gv = v.To(gpu);
    for (int64_t step = 1; step <= 3; ++step) {
      std::vector<double> gd(1000);
      for (size_t i = 0; i < gd.size(); ++i) gd[i] = std::cos(0.3 * i * step);
      const Tensor g = FromDoubles(gd, shape, dtype);
      const AdamWHyper h{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = step};
      AdamWStepInPlace(p, g, m, v, h);
      AdamWStepInPlace(gp, g.To(gpu), gm, gv, h);
    }
    const double tol = dtype == DType::kFloat32 ? 1e-6 : 1.0 / 128;
    const std::vector<double> want = p.ToDoubleVector(), got = gp.ToDoubleVector();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i])));
  }
}

TEST_F(OptimizerCudaTest, SgdWithMomentumAndNesterovEqualsCpu) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (bool nesterov : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (nesterov ? " nesterov" : ""));
      std::vector<double> p0(500);
      for (size_t i = 0; i < p0.size(); ++i) p0[i] = std::sin(0.01 * i);
      const std::vector<int64_t> shape = {5, 100};
      Tensor p = FromDoubles(p0, shape, dtype), buf = Zeros(shape, dtype);
      Tensor gp = p.To(gpu), gbuf = buf.To(gpu);
      for (int step = 0; step < 3; ++step) {
        std::vector<double> gd(500);
        for (size_t i = 0; i < gd.size(); ++i) gd[i] = std::cos(0.3 * i * (step + 1));
        const Tensor g = FromDoubles(gd, shape, dtype);
        SgdStepInPlace(p, g, buf, 0.05, 0.9, 0.1, 0.01, nesterov, step == 0);
        SgdStepInPlace(gp, g.To(gpu), gbuf, 0.05, 0.9, 0.1, 0.01, nesterov, step == 0);
      }
      const double tol = dtype == DType::kFloat32 ? 1e-6 : 1.0 / 128;
      const std::vector<double> got = gp.To(Device::Cpu()).ToDoubleVector(), want = p.ToDoubleVector();
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace tessel
