// core/ops/elementwise_scalar_cuda_test.cc — add_scalar, mul_scalar, mul_ (in place, on a strided view)
// and add_ (alpha, broadcast source) on a GPU equal the CPU ops bit for bit (float32, bfloat16); the
// in-place ops bump the version like the CPU; int64 fails with kUnimplemented naming the op. Skips without
// a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class ElementwiseScalarCudaTest : public memory::testing::GpuTest {};

const Device kGpu = Device::Cuda(0);

std::vector<double> Host(const Tensor& t) { return t.To(Device::Cpu()).ToDoubleVector(); }

TEST_F(ElementwiseScalarCudaTest, ScalarAndInPlaceOpsEqualCpuBitwise) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = cuda::testing::Wave({7, 9}, dtype, 1);
    EXPECT_EQ(Host(AddScalar(x.To(kGpu), 0.37)), AddScalar(x, 0.37).ToDoubleVector());
    EXPECT_EQ(Host(MulScalar(x.To(kGpu), -2.5)), MulScalar(x, -2.5).ToDoubleVector());
    Tensor g = x.To(kGpu), c = Empty({7, 9}, dtype, Device::Cpu());
    CopyInto(c, x);
    const uint32_t version = g.impl()->version();
    MulScalarInPlace(MakeView(g, {7, 3}, {9, 3}, 1), 0.125);
    MulScalarInPlace(MakeView(c, {7, 3}, {9, 3}, 1), 0.125);
    EXPECT_EQ(Host(g), c.ToDoubleVector());
    EXPECT_EQ(g.impl()->version(), version + 1);
    const Tensor row = cuda::testing::Wave({9}, dtype, 2);
    AddInPlace(g, row.To(kGpu), -0.75);
    AddInPlace(c, row, -0.75);
    EXPECT_EQ(Host(g), c.ToDoubleVector());
  }
  testing::ExpectErrorContains([] { MulScalarInPlace(Zeros({2}, DType::kInt64, kGpu), 2.0); },
                               ErrorCode::kUnimplemented, "mul_: the CUDA kernel supports float32 and bfloat16");
}

}  // namespace
}  // namespace tessel
