// core/ops/view_cuda_test.cc — view ops on CUDA tensors: transpose / permute / narrow views made
// contiguous on the device, copied to the host, written through with copy_, and narrow's backward scatter
// equal the CPU results exactly (copies are bit-exact); cast / clone and float32 <-> bfloat16 converting
// copies on the device equal the CPU bitwise. Skips without a GPU.
// Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/elementwise.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

class ViewCudaTest : public memory::testing::GpuTest {};

TEST_F(ViewCudaTest, ViewsMadeContiguousAndCopiedEqualCpuExactly) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = cuda::testing::Wave({2, 3, 5, 7}, dtype, 1);
    const Tensor g = x.To(gpu);
    EXPECT_EQ(Contiguous(Transpose(g, 1, 2)).To(Device::Cpu()).ToDoubleVector(),
              Contiguous(Transpose(x, 1, 2)).ToDoubleVector());
    EXPECT_EQ(Permute(g, {3, 1, 0, 2}).To(Device::Cpu()).ToDoubleVector(),
              Contiguous(Permute(x, {3, 1, 0, 2})).ToDoubleVector());
    EXPECT_EQ(Narrow(g, 3, 2, 4).To(Device::Cpu()).ToDoubleVector(), Contiguous(Narrow(x, 3, 2, 4)).ToDoubleVector());
    const Tensor dst = Zeros({2, 3, 5, 7}, dtype, gpu), host_dst = Zeros({2, 3, 5, 7}, dtype);
    CopyInto(Narrow(dst, 2, 1, 3), Narrow(g, 2, 0, 3));  // device strided -> device strided
    CopyInto(Narrow(host_dst, 2, 1, 3), Narrow(x, 2, 0, 3));
    EXPECT_EQ(dst.To(Device::Cpu()).ToDoubleVector(), host_dst.ToDoubleVector());
  }
}

// Inner dims of 16 elements: the copy moves 16 bytes per step (cuda::WidenCopy), a GPT head transpose.
TEST_F(ViewCudaTest, WidenedHeadTransposesEqualCpuExactly) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = cuda::testing::Wave({2, 5, 3, 16}, dtype, 3);
    EXPECT_EQ(Contiguous(Transpose(x.To(gpu), 1, 2)).To(Device::Cpu()).ToDoubleVector(),
              Contiguous(Transpose(x, 1, 2)).ToDoubleVector());
    EXPECT_EQ(Contiguous(Narrow(Transpose(x.To(gpu), 1, 2), 3, 8, 8)).To(Device::Cpu()).ToDoubleVector(),
              Contiguous(Narrow(Transpose(x, 1, 2), 3, 8, 8)).ToDoubleVector());
  }
}

TEST_F(ViewCudaTest, NarrowBackwardScattersIntoZerosOnTheDevice) {
  const Tensor grad = cuda::testing::Wave({2, 3}, DType::kFloat32, 2);
  const Attrs a = Attrs()
                      .Set("input_shape", std::vector<int64_t>{2, 7})
                      .Set("dim", int64_t{1})
                      .Set("start", int64_t{2})
                      .Set("length", int64_t{3});
  const OpDef& op = GetOp("narrow_backward");
  EXPECT_EQ(Dispatch(op, std::vector<Tensor>{grad.To(Device::Cuda(0))}, a)[0].To(Device::Cpu()).ToDoubleVector(),
            Dispatch(op, std::vector<Tensor>{grad}, a)[0].ToDoubleVector());
}

// Device-side float32 <-> bfloat16 conversion (the cast op, mixed-precision copies): bitwise the CPU's,
// into a transposed destination too; clone stays on the device; other conversions fail naming dtypes.
TEST_F(ViewCudaTest, CastAndConvertingCopiesOnTheDeviceEqualCpuBitwise) {
  const Device gpu = Device::Cuda(0);
  const Tensor x = cuda::testing::Wave({6, 5}, DType::kFloat32, 3);
  const Tensor g = x.To(gpu);
  const Tensor gb = Cast(g, DType::kBFloat16);
  EXPECT_EQ(gb.device(), gpu);
  EXPECT_EQ(gb.To(Device::Cpu()).ToDoubleVector(), Cast(x, DType::kBFloat16).ToDoubleVector());
  EXPECT_EQ(Cast(gb, DType::kFloat32).To(Device::Cpu()).ToDoubleVector(),
            Cast(Cast(x, DType::kBFloat16), DType::kFloat32).ToDoubleVector());
  const Tensor dst = Zeros({5, 6}, DType::kBFloat16, gpu), host_dst = Zeros({5, 6}, DType::kBFloat16);
  CopyInto(Transpose(dst, 0, 1), g);
  CopyInto(Transpose(host_dst, 0, 1), x);
  EXPECT_EQ(dst.To(Device::Cpu()).ToDoubleVector(), host_dst.ToDoubleVector());
  const Tensor c = Clone(g);
  EXPECT_EQ(c.device(), gpu);
  EXPECT_NE(c.raw_data(), g.raw_data());
  EXPECT_EQ(c.To(Device::Cpu()).ToDoubleVector(), x.ToDoubleVector());
  const Tensor ints = Zeros({3}, DType::kInt64, gpu);
  testing::ExpectErrorContains([&] { CopyInto(Transpose(Zeros({3, 1}, DType::kFloat32, gpu), 0, 1), ints); },
                               ErrorCode::kUnimplemented,
                               "converts between float32, bfloat16 and bool only, got int64 to float32");
  const Tensor mask = Gt(x, Zeros({1}, DType::kFloat32));
  EXPECT_EQ(Cast(mask.To(gpu), DType::kFloat32).To(Device::Cpu()).ToDoubleVector(),
            Cast(mask, DType::kFloat32).ToDoubleVector());
  EXPECT_EQ(Cast(g, DType::kBool).To(Device::Cpu()).ToDoubleVector(), Cast(x, DType::kBool).ToDoubleVector());
}

}  // namespace
}  // namespace tessel
