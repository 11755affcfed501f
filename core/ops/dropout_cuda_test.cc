// core/ops/dropout_cuda_test.cc — dropout on a GPU equals the CPU op bit for bit (float32, bfloat16, a
// strided view, a block of a larger tensor through the op's full_shape / block_offset attrs) and its
// backward is the same mask; float64 fails with kUnimplemented naming the op. Skips without a GPU.
// Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <vector>

#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/dropout.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class DropoutCudaTest : public memory::testing::GpuTest {};

const Device kGpu = Device::Cuda(0);

std::vector<double> Host(const Tensor& t) { return t.To(Device::Cpu()).ToDoubleVector(); }

TEST_F(DropoutCudaTest, MasksAndGradientsEqualCpuBitwise) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = cuda::testing::Wave({33, 17}, dtype, 1);
    Generator gc(12, 3), gg(12, 3);
    EXPECT_EQ(Host(Dropout(x.To(kGpu), 0.3, gg)), Dropout(x, 0.3, gc).ToDoubleVector());
    const Tensor xt = MakeView(x, {17, 33}, {1, 17}, 0);  // transposed
    EXPECT_EQ(Host(Dropout(MakeView(x.To(kGpu), {17, 33}, {1, 17}, 0), 0.6, gg)), Dropout(xt, 0.6, gc).ToDoubleVector());
    const Attrs at = Attrs().Set("p", 0.5).Set("seed", 99).Set("offset", 7).Set("full_shape", std::vector<int64_t>{40, 17})
                         .Set("block_offset", std::vector<int64_t>{5, 0});
    EXPECT_EQ(Host(Dispatch(GetOp("dropout"), TensorList{x.To(kGpu)}, at)[0]),
              Dispatch(GetOp("dropout"), TensorList{x}, at)[0].ToDoubleVector());
  }
  Tensor w = Ones({64}, DType::kFloat32, kGpu);
  w.set_requires_grad(true);
  Generator g(4);
  const Tensor y = Dropout(w, 0.5, g);
  Backward(y, Ones({64}, DType::kFloat32, kGpu));
  EXPECT_EQ(Host(w.grad()), Host(y));  // ones in, ones back: the gradient is the output's mask · 2
  testing::ExpectErrorContains([&] { Dropout(Zeros({2}, DType::kFloat64, kGpu), 0.5, g); }, ErrorCode::kUnimplemented,
                               "dropout: the CUDA kernel supports float32 and bfloat16");
}

}  // namespace
}  // namespace tessel
