// core/ops/concat_cuda_test.cc — cat / stack on a GPU equal the CPU ops bitwise (float32 and bfloat16)
// along every dim of 3-d inputs (strided slabs go through the CUDA strided copy kernel), including an
// empty input and a transposed (non-contiguous) input; the backward of cat (Narrow views) gives each
// input its slab of the gradient. Skips without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/concat.h"
#include "core/ops/elementwise.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/reduction.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

class ConcatCudaTest : public memory::testing::GpuTest {};

const Device kGpu = Device::Cuda(0);

std::vector<double> Host(const Tensor& t) { return t.To(Device::Cpu()).ToDoubleVector(); }

TEST_F(ConcatCudaTest, CatAndStackEqualCpuAlongEveryDim) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " dim " + std::to_string(dim));
      std::vector<int64_t> sa = {3, 4, 5}, sb = {3, 4, 5}, se = {3, 4, 5};
      sb[dim] = 2;
      se[dim] = 0;
      const Tensor a = cuda::testing::Wave(sa, dtype, 1), b = cuda::testing::Wave(sb, dtype, 2);
      const Tensor e = cuda::testing::Wave(se, dtype, 3);
      EXPECT_EQ(Host(Cat({a.To(kGpu), e.To(kGpu), b.To(kGpu)}, dim)), Cat({a, e, b}, dim).ToDoubleVector());
      const Tensor c = cuda::testing::Wave(sa, dtype, 4);
      EXPECT_EQ(Host(Stack({a.To(kGpu), c.To(kGpu)}, dim)), Stack({a, c}, dim).ToDoubleVector());
    }
  }
  const Tensor t = cuda::testing::Wave({5, 4}, DType::kFloat32, 5);
  const Tensor u = cuda::testing::Wave({4, 3}, DType::kFloat32, 6);
  EXPECT_EQ(Host(Cat({Transpose(t.To(kGpu), 0, 1), u.To(kGpu)}, 1)), Cat({Transpose(t, 0, 1), u}, 1).ToDoubleVector());
}

TEST_F(ConcatCudaTest, CatBackwardGivesEachInputItsSlab) {
  Tensor a = cuda::testing::Wave({2, 3}, DType::kFloat32, 1).To(kGpu).set_requires_grad(true);
  Tensor b = cuda::testing::Wave({2, 2}, DType::kFloat32, 2).To(kGpu).set_requires_grad(true);
  const Tensor w = cuda::testing::Wave({2, 5}, DType::kFloat32, 3);
  Backward(Sum(Mul(Cat({a, b}, 1), w.To(kGpu))));
  const std::vector<double> wv = w.ToDoubleVector();
  EXPECT_EQ(Host(a.grad()), (std::vector<double>{wv[0], wv[1], wv[2], wv[5], wv[6], wv[7]}));
  EXPECT_EQ(Host(b.grad()), (std::vector<double>{wv[3], wv[4], wv[8], wv[9]}));
}

}  // namespace
}  // namespace tessel
