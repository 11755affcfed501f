// core/ops/ternary_cuda_test.cc — where, masked_fill, eq / lt / gt on a GPU equal the CPU ops bit for bit
// (broadcast and transposed operands; float32, bfloat16, int64), and with them the backward of amax and of
// the 2-norm now runs on the GPU and equals the CPU's (float32 1e-6 relative). Skips without a GPU.
// Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/reduction.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class TernaryCudaTest : public memory::testing::GpuTest {};

const Device kGpu = Device::Cuda(0);

std::vector<double> Host(const Tensor& t) { return t.To(Device::Cpu()).ToDoubleVector(); }

TEST_F(TernaryCudaTest, SelectionsAndComparisonsEqualCpu) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor a = Cast(MakeView(cuda::testing::Wave({5, 4}, DType::kFloat32, 1), {4, 5}, {1, 4}, 0), dtype);
    const Tensor b = Cast(cuda::testing::Wave({5}, DType::kFloat32, 2), dtype);
    const Tensor ga = a.To(kGpu), gb = b.To(kGpu);
    EXPECT_EQ(Host(Eq(ga, gb)), Eq(a, b).ToDoubleVector());
    EXPECT_EQ(Host(Lt(ga, gb)), Lt(a, b).ToDoubleVector());
    EXPECT_EQ(Host(Gt(ga, gb)), Gt(a, b).ToDoubleVector());
    const Tensor cond = Gt(a, b);
    EXPECT_EQ(Host(Where(cond.To(kGpu), ga, gb)), Where(cond, a, b).ToDoubleVector());
    EXPECT_EQ(Host(MaskedFill(ga, cond.To(kGpu), -3.0)), MaskedFill(a, cond, -3.0).ToDoubleVector());
  }
  const Tensor x = cuda::testing::Wave({2, 3}, DType::kFloat32, 3);
  testing::ExpectErrorContains([&] { Where(x.To(kGpu), x.To(kGpu), x.To(kGpu)); }, ErrorCode::kInvalidArgument,
                               "where: condition must be a bool tensor");
}

TEST_F(TernaryCudaTest, AmaxAndNormBackwardRunOnTheGpuAndEqualCpu) {
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which == 0 ? "amax" : "norm");
    // A fresh leaf per op on both sides (a shared one accumulated amax's gradient into norm's on the CPU).
    Tensor xc = cuda::testing::Wave({6, 7}, DType::kFloat32, 4), xg = xc.To(kGpu);
    xc.set_requires_grad(true);
    xg.set_requires_grad(true);
    Backward(Sum(which == 0 ? Amax(xc, {1}) : Norm(xc, 2.0, {1})));
    Backward(Sum(which == 0 ? Amax(xg, {1}) : Norm(xg, 2.0, {1})));
    EXPECT_EQ(xg.grad().device(), kGpu);
    const std::vector<double> got = Host(xg.grad()), want = xc.grad().ToDoubleVector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << i;
  }
}

}  // namespace
}  // namespace tessel
