// core/ops/matmul_cuda_test.cc — linear and matmul on cuBLASLt equal the CPU ops (fp32: 1e-5 relative,
// the summation order differs; bf16: one bf16 ulp of the output scale): linear with and without the fused
// bias for a 3-D input and a transposed weight, and the backward products (dgrad, wgrad summed over the
// batch, batched, q · kᵀ); the workspace is counted in the "other" ledger; a weight with no unit stride
// fails naming the op and device; a repeated product hits the plan cache and uses its own bias. Skips
// without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/allocator.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/cuda/gemm_cache.h"
#include "core/ops/matmul.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class MatmulCudaTest : public memory::testing::GpuTest {};

Tensor Values(std::vector<int64_t> shape, double scale, DType dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * (((i * 7919) % 101) / 50.0 - 1.0);
  return FromDoubles(v, shape, dtype);
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], rel * scale) << "element " << i;
}

TEST_F(MatmulCudaTest, LinearWithFusedBiasEqualsCpu) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = Values({2, 5, 48}, 1.0, dtype), w = Values({24, 48}, 0.5, dtype), b = Values({24}, 2.0, dtype);
    const double rel = dtype == DType::kFloat32 ? 1e-5 : 1.0 / 128;
    ExpectClose(Linear(x.To(gpu), w.To(gpu), b.To(gpu)).ToDoubleVector(), Linear(x, w, b).ToDoubleVector(), rel);
    ExpectClose(Linear(x.To(gpu), w.To(gpu)).ToDoubleVector(), Linear(x, w).ToDoubleVector(), rel);
  }
  EXPECT_GE(memory::Stats(gpu)[memory::Ledger::kOther].live, int64_t{32} << 20);  // the stream's workspace
}

TEST_F(MatmulCudaTest, BackwardProductsEqualCpu) {
  const Device gpu = Device::Cuda(0);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const double rel = dtype == DType::kFloat32 ? 1e-5 : 1.0 / 128;
    const Tensor x = Values({2, 5, 48}, 1.0, dtype), w = Values({24, 48}, 0.5, dtype),
                 g = Values({2, 5, 24}, 2.0, dtype);
    const OpDef& mm = GetOp("matmul");
    auto both = [&](const Tensor& a, const Tensor& b, const Attrs& attrs) {
      ExpectClose(Dispatch(mm, std::vector<Tensor>{a.To(gpu), b.To(gpu)}, attrs)[0].ToDoubleVector(),
                  Dispatch(mm, std::vector<Tensor>{a, b}, attrs)[0].ToDoubleVector(), rel);
    };
    both(g, w, Attrs());                                                        // dgrad: g · w
    both(g, x, Attrs().Set("transpose_a", true).Set("sum_batch", true));        // wgrad: Σ gᵀ · x
    both(x, Values({2, 48, 7}, 1.0, dtype), Attrs());                           // batched
    both(x, Values({2, 7, 48}, 1.0, dtype), Attrs().Set("transpose_b", true));  // q · kᵀ
  }
}

TEST_F(MatmulCudaTest, TransposedWeightWorksAndAStridedOneFailsNamingOpAndDevice) {
  const Device gpu = Device::Cuda(0);
  const Tensor w = Values({48, 24}, 0.5, DType::kFloat32);
  const Tensor gw = w.To(gpu);
  const Tensor wt = MakeDense(w.impl()->storage(), {24, 48}, {1, 24}, 0, DType::kFloat32);
  const Tensor gwt = MakeDense(gw.impl()->storage(), {24, 48}, {1, 24}, 0, DType::kFloat32);  // unit row stride
  const Tensor x = Values({5, 48}, 1.0, DType::kFloat32);
  ExpectClose(Linear(x.To(gpu), gwt).ToDoubleVector(), Linear(x, wt).ToDoubleVector(), 1e-5);
  const Tensor strided = MakeDense(gw.impl()->storage(), {12, 12}, {48, 2}, 0, DType::kFloat32);  // no unit stride
  testing::ExpectErrorContains(
      [&] {
        Linear(Values({5, 12}, 1.0, DType::kFloat32).To(gpu), strided);
      },
      ErrorCode::kUnimplemented, {"linear: the CUDA kernel needs", "cuda:0"});
}

// The cuBLASLt plan cache (cuda/gemm_cache.h): the same product again is a hit (no descriptor, layout or
// heuristic call), and a cached bias-epilogue plan reads the new call's bias pointer.
TEST_F(MatmulCudaTest, RepeatedLinearReusesTheCachedPlanWithEachCallsBias) {
  const Device gpu = Device::Cuda(0);
  const Tensor x = Values({2, 5, 48}, 1.0, DType::kFloat32), w = Values({24, 48}, 0.5, DType::kFloat32);
  const Tensor b1 = Values({24}, 2.0, DType::kFloat32), b2 = Values({24}, -3.0, DType::kFloat32);
  const Tensor xg = x.To(gpu), wg = w.To(gpu), b1g = b1.To(gpu), b2g = b2.To(gpu);
  Linear(xg, wg, b1g);  // builds the plan (or finds one an earlier test built)
  const cuda::GemmCacheStats before = cuda::LtPlanCacheStats();
  for (int i = 0; i < 4; ++i) Linear(xg, wg, b1g);
  const Tensor y2 = Linear(xg, wg, b2g);
  const cuda::GemmCacheStats after = cuda::LtPlanCacheStats();
  EXPECT_EQ(after.hits - before.hits, 5);
  EXPECT_EQ(after.misses, before.misses);
  ExpectClose(y2.ToDoubleVector(), Linear(x, w, b2).ToDoubleVector(), 1e-5);
}

}  // namespace
}  // namespace tessel
