// core/ops/loss_cuda_test.cc — cross_entropy and cross_entropy_backward on a GPU equal the CPU kernels
// (float32 1e-5 relative, bfloat16 one bf16 ulp) for every reduction, ignored targets, a GPT-2 sized
// vocabulary and a batch whose targets are all ignored (NaN mean, zero gradient); an out-of-range target
// raises kOutOfRange naming it. Skips without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/loss.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

class LossCudaTest : public memory::testing::GpuTest {};

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return cuda::testing::Wave(shape, dtype, seed, 3.0);
}

void ExpectClose(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const std::vector<double> g = got.To(Device::Cpu()).ToDoubleVector(), w = want.ToDoubleVector();
  const double rel = want.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], rel * std::abs(w[i]) + 1e-6) << "index " << i;
  }
}

// `t` in `dtype` (a float32 result rounded once, or a bfloat16 input widened).
Tensor As(const Tensor& t, DType dtype) {
  Tensor r = Empty(t.sizes(), dtype);
  CopyInto(r, t);
  return r;
}

// The CUDA kernels keep torch's CUDA float32 math; the CPU op rounds a 16-bit log-sum-exp and sum as torch's CPU
// kernels: the reference is the float32 CPU op rounded once to the logits' dtype.
void CheckAgainstCpu(const Tensor& logits, const std::vector<int64_t>& target) {
  const Device gpu = Device::Cuda(0);
  const Tensor t = FromVector(target, {static_cast<int64_t>(target.size())});
  const DType dt = logits.dtype();
  const Tensor logits32 = As(logits, DType::kFloat32);
  for (const std::string red : {"none", "sum", "mean"}) {
    SCOPED_TRACE(red);
    ExpectClose(CrossEntropy(logits.To(gpu), t.To(gpu), -100, red), As(CrossEntropy(logits32, t, -100, red), dt));
    const Tensor grad = red == "none" ? Values({t.numel()}, dt, 4) : Full({}, 0.75, dt);
    const Attrs attrs = Attrs().Set("ignore_index", int64_t{-100}).Set("reduction", red);
    const OpDef& op = GetOp("cross_entropy_backward");
    ExpectClose(Dispatch(op, std::vector<Tensor>{grad.To(gpu), logits.To(gpu), t.To(gpu)}, attrs)[0],
                As(Dispatch(op, std::vector<Tensor>{As(grad, DType::kFloat32), logits32, t}, attrs)[0], dt));
  }
}

TEST_F(LossCudaTest, LossAndGradEqualCpuForEveryReduction) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    CheckAgainstCpu(Values({6, 300}, dtype, 1), {3, -100, 299, 0, 17, 150});
    CheckAgainstCpu(Values({4, 50257}, dtype, 2), {50256, 0, -100, 1234});
    CheckAgainstCpu(Values({3, 10}, dtype, 3), {-100, -100, -100});
  }
}

TEST_F(LossCudaTest, OutOfRangeTargetRaisesNamingIt) {
  const Tensor logits = Values({2, 5}, DType::kFloat32, 1).To(Device::Cuda(0));
  const Tensor t = FromVector<int64_t>({1, 5}, {2}).To(Device::Cuda(0));
  testing::ExpectErrorContains([&] { CrossEntropy(logits, t); }, ErrorCode::kOutOfRange,
                               "cross_entropy: target 5 (at index 1) is out of range for 5 classes");
}

}  // namespace
}  // namespace tessel
