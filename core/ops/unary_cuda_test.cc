// core/ops/unary_cuda_test.cc — gelu and gelu_backward on a GPU equal the CPU kernels for both
// approximations (float32 1e-5 relative + 1e-5, bfloat16 one bf16 ulp) on a GPT-2 MLP activation
// shape; a strided input fails with kUnimplemented naming the op. Skips without a GPU. Written and
// compiled without a GPU; NOT yet run on one.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class UnaryCudaTest : public memory::testing::GpuTest {};

void ExpectClose(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const std::vector<double> g = got.To(Device::Cpu()).ToDoubleVector(), w = want.ToDoubleVector();
  const double rel = want.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], rel * std::abs(w[i]) + 1e-5) << "index " << i;
}

TEST_F(UnaryCudaTest, GeluAndGeluBackwardEqualCpu) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = cuda::testing::Wave({4, 64, 3072}, dtype, 1), g = cuda::testing::Wave({4, 64, 3072}, dtype, 2);
    for (const std::string approx : {"none", "tanh"}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + approx);
      ExpectClose(Gelu(x.To(gpu), approx), Gelu(x, approx));
      const OpDef& op = GetOp("gelu_backward");
      const Attrs attrs = Attrs().Set("approximate", approx);
      ExpectClose(Dispatch(op, std::vector<Tensor>{g.To(gpu), x.To(gpu)}, attrs)[0],
                  Dispatch(op, std::vector<Tensor>{g, x}, attrs)[0]);
    }
  }
}

TEST_F(UnaryCudaTest, StridedInputFailsNamingTheOp) {
  const Tensor x = cuda::testing::Wave({4, 6}, DType::kFloat32, 1).To(Device::Cuda(0));
  const Tensor t = MakeDense(x.impl()->storage(), {6, 4}, {1, 6}, 0, DType::kFloat32);
  testing::ExpectErrorContains([&] { Gelu(t, "tanh"); }, ErrorCode::kUnimplemented,
                               "gelu: the CUDA kernel needs a contiguous input, got [6, 4] with strides [1, 6]");
}

}  // namespace
}  // namespace tessel
