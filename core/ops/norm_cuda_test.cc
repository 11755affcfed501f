// core/ops/norm_cuda_test.cc — layer_norm / rms_norm and their fused backward ops on a GPU equal the CPU
// kernels (outputs, float32 statistics, grad_x, grad_weight, grad_bias; float32 1e-5 relative + 1e-4,
// bfloat16 one bf16 ulp) with and without affine parameters, for rows shorter and longer than a block and
// more rows than the 64 parameter blocks; float64 fails with kUnimplemented naming the op.
// Skips without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/norm.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

class NormCudaTest : public memory::testing::GpuTest {};

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return cuda::testing::Wave(shape, dtype, seed, 2.0);
}

Tensor OnGpu(const Tensor& t) { return t.defined() ? t.To(Device::Cuda(0)) : t; }

void ExpectListsClose(const TensorList& got, const TensorList& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].defined(), want[k].defined()) << "output " << k;
    if (!want[k].defined()) continue;
    EXPECT_EQ(got[k].device(), Device::Cuda(0));
    ASSERT_EQ(got[k].sizes(), want[k].sizes());
    ASSERT_EQ(got[k].dtype(), want[k].dtype());
    const std::vector<double> g = got[k].To(Device::Cpu()).ToDoubleVector(), w = want[k].ToDoubleVector();
    const double rel = want[k].dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], rel * std::abs(w[i]) + 1e-4) << "output " << k << " index " << i;
    }
  }
}

TensorList Run(const char* op, std::vector<Tensor> in, const Attrs& attrs, bool gpu) {
  if (gpu) {
    for (Tensor& t : in) t = OnGpu(t);
  }
  return Dispatch(GetOp(op), in, attrs);
}

void CheckBoth(const Tensor& x, const Tensor& w, const Tensor& b) {
  const Tensor dy = Values(x.sizes(), x.dtype(), 5);
  const Attrs fwd = Attrs().Set("eps", 1e-5);
  const TensorList ln = Run("layer_norm", {x, w, b}, fwd, false);
  ExpectListsClose(Run("layer_norm", {x, w, b}, fwd, true), ln);
  const Attrs mask3 = Attrs().Set("output_mask", std::vector<int64_t>{1, w.defined() ? 1 : 0, 1});
  ExpectListsClose(Run("layer_norm_backward", {dy, x, w, ln[1], ln[2]}, mask3, true),
                   Run("layer_norm_backward", {dy, x, w, ln[1], ln[2]}, mask3, false));
  const TensorList rn = Run("rms_norm", {x, w}, fwd, false);
  ExpectListsClose(Run("rms_norm", {x, w}, fwd, true), rn);
  const Attrs mask2 = Attrs().Set("output_mask", std::vector<int64_t>{1, w.defined() ? 1 : 0});
  ExpectListsClose(Run("rms_norm_backward", {dy, x, w, rn[1]}, mask2, true),
                   Run("rms_norm_backward", {dy, x, w, rn[1]}, mask2, false));
}

TEST_F(NormCudaTest, ForwardAndFusedBackwardEqualCpuWithAndWithoutAffine) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t cols : {5, 768, 1000}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " cols " + std::to_string(cols));
      const Tensor x = Values({3, 70, cols}, dtype, 3);  // 210 rows: 64 parameter blocks of 4, some empty
      CheckBoth(x, Values({cols}, dtype, 11), Values({cols}, dtype, 13));
      CheckBoth(x, Tensor(), Tensor());
    }
  }
}

TEST_F(NormCudaTest, Float64FailsNamingTheOpAndDevice) {
  const Tensor x = Zeros({2, 3}, DType::kFloat64, Device::Cuda(0));
  testing::ExpectErrorContains(
      [&] { LayerNorm(x, Tensor(), Tensor()); }, ErrorCode::kUnimplemented,
      "layer_norm: the CUDA kernel supports float32 and bfloat16, got x [2, 3] float64 on cuda:0");
}

}  // namespace
}  // namespace tessel
