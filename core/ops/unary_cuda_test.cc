// core/ops/unary_cuda_test.cc — gelu and gelu_backward on a GPU equal the CPU kernels for both
// approximations (float32 1e-5 relative + 1e-5, bfloat16 one bf16 ulp) on a GPT-2 MLP activation
// shape and on a transposed input. Skips without a GPU.
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

// A transposed input runs (copied contiguous on the device first, cuda::ContiguousInputs) and equals the
// CPU op on the same view.
TEST_F(UnaryCudaTest, StridedInputEqualsCpu) {
  const Tensor c = cuda::testing::Wave({4, 6}, DType::kFloat32, 1);
  const Tensor x = c.To(Device::Cuda(0));
  const Tensor tc = MakeDense(c.impl()->storage(), {6, 4}, {1, 6}, 0, DType::kFloat32);
  const Tensor tg = MakeDense(x.impl()->storage(), {6, 4}, {1, 6}, 0, DType::kFloat32);
  ASSERT_FALSE(tg.is_contiguous());
  const std::vector<double> got = Gelu(tg, "tanh").To(Device::Cpu()).ToDoubleVector();
  const std::vector<double> want = Gelu(tc, "tanh").ToDoubleVector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

}  // namespace
}  // namespace tessel
