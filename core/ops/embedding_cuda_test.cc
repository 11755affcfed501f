// core/ops/embedding_cuda_test.cc — embedding on a GPU gathers exactly the CPU rows and
// embedding_backward equals the CPU table bitwise in float32 (same summation order) and in bfloat16 (the float32
// table rounded once: the CPU op rounds after every add, as torch's CPU kernel), with
// repeated, int32 and GPT-2 sized indices; an out-of-range index raises kOutOfRange naming it.
// Skips without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/embedding.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

class EmbeddingCudaTest : public memory::testing::GpuTest {};

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return cuda::testing::Wave(shape, dtype, seed, 3.0);
}

void CheckAgainstCpu(int64_t V, int64_t C, const Tensor& idx, DType dtype) {
  const Device gpu = Device::Cuda(0);
  const Tensor w = Values({V, C}, dtype, 1);
  const Tensor out = Embedding(w.To(gpu), idx.To(gpu));
  EXPECT_EQ(out.device(), gpu);
  EXPECT_EQ(out.To(Device::Cpu()).ToDoubleVector(), Embedding(w, idx).ToDoubleVector());
  Shape gshape = idx.sizes();
  gshape.push_back(C);
  const Tensor grad = Values(gshape, dtype, 2);
  const Attrs attrs = Attrs().Set("num_weights", V);
  const OpDef& op = GetOp("embedding_backward");
  // The CUDA kernel sums each row in float32 and rounds once (as torch's CUDA kernel); the CPU op rounds a 16-bit
  // gradient after every add (as torch's CPU one): the bfloat16 reference is the float32 CPU op rounded once.
  Tensor grad32 = Empty(grad.sizes(), DType::kFloat32);
  CopyInto(grad32, grad);
  Tensor want = Empty(Shape{V, C}, dtype);
  CopyInto(want, Dispatch(op, std::vector<Tensor>{grad32, idx}, attrs)[0]);
  EXPECT_EQ(Dispatch(op, std::vector<Tensor>{grad.To(gpu), idx.To(gpu)}, attrs)[0].To(Device::Cpu()).ToDoubleVector(),
            want.ToDoubleVector());
}

TEST_F(EmbeddingCudaTest, GatherAndScatterAddEqualCpuBitwise) {
  const std::vector<int64_t> small = {3, 9, 3, 0, 10, 3, 9, 5, 3, 0, 1, 3};
  std::vector<int64_t> gpt(4 * 256);
  for (size_t i = 0; i < gpt.size(); ++i) gpt[i] = (i * 7919) % 50257 % (i % 3 == 0 ? 100 : 50257);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    CheckAgainstCpu(11, 7, FromVector(small, {3, 4}), dtype);
    CheckAgainstCpu(11, 300, FromVector(small, {12}), dtype);
    CheckAgainstCpu(50257, 64, FromVector(gpt, {4, 256}), dtype);
  }
  std::vector<int32_t> small32(small.begin(), small.end());
  CheckAgainstCpu(11, 7, FromVector(small32, {12}), DType::kFloat32);
}

TEST_F(EmbeddingCudaTest, OutOfRangeIndexRaisesNamingIt) {
  const Tensor w = Values({4, 3}, DType::kFloat32, 1).To(Device::Cuda(0));
  const Tensor idx = FromVector<int64_t>({0, 4}, {2}).To(Device::Cuda(0));
  testing::ExpectErrorContains([&] { Embedding(w, idx); }, ErrorCode::kOutOfRange,
                               "embedding: index 4 (at flat position 1 of indices [2]) is out of range");
}

}  // namespace
}  // namespace tessel
