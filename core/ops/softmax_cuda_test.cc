// core/ops/softmax_cuda_test.cc — softmax / log_softmax and their backward ops on a GPU equal the CPU
// kernels (float32 1e-5 relative, bfloat16 one bf16 ulp) for every dim of a 3-d tensor, lanes longer than
// a block, causal-masked lanes and a transposed input; float64 fails with kUnimplemented naming the op.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/softmax.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class SoftmaxCudaTest : public memory::testing::GpuTest {};

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return cuda::testing::Wave(shape, dtype, seed, 4.0);
}

void ExpectClose(const Tensor& got_t, const Tensor& want_t) {
  ASSERT_EQ(got_t.sizes(), want_t.sizes());
  const std::vector<double> got = got_t.ToDoubleVector(), want = want_t.ToDoubleVector();
  const double rel = want_t.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << i;
      if (std::isinf(want[i])) {
        EXPECT_EQ(got[i], want[i]) << i;
      }
      continue;
    }
    ASSERT_NEAR(got[i], want[i], rel * std::abs(want[i]) + 1e-5) << "index " << i;
  }
}

// `t` in `dtype` (a float32 result rounded once, or a bfloat16 input widened).
Tensor As(const Tensor& t, DType dtype) {
  Tensor r = Empty(t.sizes(), dtype);
  CopyInto(r, t);
  return r;
}

void CheckAgainstCpu(const Tensor& x, int64_t dim) {
  const Device gpu = Device::Cuda(0);
  const Tensor g = Values(x.sizes(), x.dtype(), 9);
  const Attrs attrs = Attrs().Set("dim", dim);
  // The CUDA kernel keeps torch's CUDA float32 log-sum-exp; the CPU op rounds a 16-bit one along the last dim as
  // torch's CPU kernel: the log_softmax reference is the float32 CPU op rounded once.
  const Tensor y = Softmax(x, dim), ly = As(LogSoftmax(As(x, DType::kFloat32), dim), x.dtype());
  const Tensor gy = Softmax(x.To(gpu), dim), gly = LogSoftmax(x.To(gpu), dim);
  EXPECT_EQ(gy.device(), gpu);
  ExpectClose(gy.To(Device::Cpu()), y);
  ExpectClose(gly.To(Device::Cpu()), ly);
  for (const char* op : {"softmax_backward", "log_softmax_backward"}) {
    const Tensor& out = op[0] == 's' ? y : ly;
    const Tensor want = Dispatch(GetOp(op), std::vector<Tensor>{g, out}, attrs)[0];
    const Tensor got = Dispatch(GetOp(op), std::vector<Tensor>{g.To(gpu), out.To(gpu)}, attrs)[0];
    SCOPED_TRACE(op);
    ExpectClose(got.To(Device::Cpu()), want);
  }
}

TEST_F(SoftmaxCudaTest, ForwardAndBackwardEqualCpuOnEveryDimAndLongLanes) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    for (int64_t dim : {0, 1, 2}) CheckAgainstCpu(Values({3, 5, 7}, dtype, 1), dim);
    CheckAgainstCpu(Values({6, 1000}, dtype, 2), 1);
    CheckAgainstCpu(Values({2, 50257}, dtype, 3), -1);  // a GPT-2 vocabulary row
  }
}

TEST_F(SoftmaxCudaTest, CausalMaskedAndFullyMaskedLanesEqualCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(8 * 64);
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t i = 0; i < 64; ++i) v[r * 64 + i] = i > 8 * r ? -inf : std::cos(0.3f * i);
  }
  for (int64_t i = 0; i < 64; ++i) v[5 * 64 + i] = -inf;
  CheckAgainstCpu(FromVector(v, {8, 64}), 1);
}

// A transposed input runs (copied contiguous on the device first, cuda::ContiguousInputs) and equals the
// CPU op on the same view; float64 fails naming the op.
TEST_F(SoftmaxCudaTest, StridedInputEqualsCpuAndFloat64FailsNamingTheOp) {
  const Tensor c = Values({4, 6}, DType::kFloat32, 1);
  const Tensor g = c.To(Device::Cuda(0));
  const Tensor tc = MakeDense(c.impl()->storage(), {6, 4}, {1, 6}, 0, DType::kFloat32);
  const Tensor tg = MakeDense(g.impl()->storage(), {6, 4}, {1, 6}, 0, DType::kFloat32);
  ASSERT_FALSE(tg.is_contiguous());
  const std::vector<double> got = Softmax(tg, 1).To(Device::Cpu()).ToDoubleVector();
  const std::vector<double> want = Softmax(tc, 1).ToDoubleVector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  const Tensor d = Zeros({3}, DType::kFloat64, Device::Cuda(0));
  testing::ExpectErrorContains([&] { LogSoftmax(d, 0); }, ErrorCode::kUnimplemented,
                               "log_softmax: the CUDA kernel supports float32 and bfloat16, got input [3] float64");
}

}  // namespace
}  // namespace tessel
