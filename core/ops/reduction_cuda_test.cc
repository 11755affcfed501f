// core/ops/reduction_cuda_test.cc — sum / mean over dims and sum_backward on a GPU equal the CPU kernels
// (float32 1e-5 relative, bfloat16 one bf16 ulp) for every dims subset, keepdim, a transposed input and a
// GPT-2 sized [B*T, C] column sum; amax (bitwise) and norm p = 1, 2, inf for every dims subset, NaN
// propagation; max along each dim (values, first indices) and its backward; int64 input and norm p = 3
// fail with kUnimplemented naming the op.
// Skips without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class ReductionCudaTest : public memory::testing::GpuTest {};

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return cuda::testing::Wave(shape, dtype, seed, 3.0);
}

void ExpectClose(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.device(), Device::Cuda(0));
  const std::vector<double> g = got.To(Device::Cpu()).ToDoubleVector(), w = want.ToDoubleVector();
  const double rel = want.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], rel * std::abs(w[i]) + 1e-4) << "index " << i;
}

void CheckAllDims(const Tensor& x, const Tensor& gx) {
  const std::vector<std::vector<int64_t>> all = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {}, {-1}};
  for (const auto& dims : all) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(dims) + (keepdim ? " keepdim" : ""));
      ExpectClose(Sum(gx, dims, keepdim), Sum(x, dims, keepdim));
      ExpectClose(Mean(gx, dims, keepdim), Mean(x, dims, keepdim));
      const Tensor g = Values(Sum(x, dims, keepdim).sizes(), x.dtype(), 5);
      const Attrs attrs = Attrs().Set("shape", x.sizes()).Set("dims", dims).Set("keepdim", keepdim).Set("scale", 0.25);
      const OpDef& op = GetOp("sum_backward");
      ExpectClose(Dispatch(op, std::vector<Tensor>{g.To(Device::Cuda(0))}, attrs)[0],
                  Dispatch(op, std::vector<Tensor>{g}, attrs)[0]);
    }
  }
}

TEST_F(ReductionCudaTest, SumMeanAndSumBackwardEqualCpuForEveryDimsSubset) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = Values({4, 70, 6}, dtype, 1);
    CheckAllDims(x, x.To(Device::Cuda(0)));
    const Tensor base = Values({6, 70, 4}, dtype, 2);
    const Tensor gbase = base.To(Device::Cuda(0));
    CheckAllDims(MakeDense(base.impl()->storage(), {4, 70, 6}, {1, 4, 280}, 0, dtype),
                 MakeDense(gbase.impl()->storage(), {4, 70, 6}, {1, 4, 280}, 0, dtype));
    const Tensor bias_grad = Values({8 * 1024, 768}, dtype, 3);  // GPT-2: Σ over B*T rows per channel
    ExpectClose(Sum(bias_grad.To(Device::Cuda(0)), {0}), Sum(bias_grad, {0}));
    // sum_to_size over leading dims (a broadcast bias's gradient): the two-pass column sum, 111 columns
    // (not a multiple of its 32-column blocks) over 130 rows, and [1, 40] kept with a size-1 dim.
    const std::vector<int64_t> trailing = {3, 37}, row = {1, 40};
    const Tensor y = Values({130, 3, 37}, dtype, 4), z = Values({200, 40}, dtype, 6);
    ExpectClose(SumToSize(y.To(Device::Cuda(0)), trailing), SumToSize(y, trailing));
    ExpectClose(SumToSize(z.To(Device::Cuda(0)), row), SumToSize(z, row));
  }
}

TEST_F(ReductionCudaTest, IntegerSumFailsNamingTheOp) {
  const Tensor x = Zeros({2, 3}, DType::kInt64, Device::Cuda(0));
  testing::ExpectErrorContains([&] { Sum(x, {1}); }, ErrorCode::kUnimplemented,
                               "sum: the CUDA kernel supports float32 and bfloat16, got input [2, 3] int64 on cuda:0");
}

TEST_F(ReductionCudaTest, AmaxAndNormsEqualCpuForEveryDimsSubsetAndPropagateNan) {
  const std::vector<std::vector<int64_t>> all = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {}, {-1}};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = Values({4, 70, 6}, dtype, 1);
    const Tensor gx = x.To(Device::Cuda(0));
    for (const auto& dims : all) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + ::testing::PrintToString(dims));
      EXPECT_EQ(Amax(gx, dims).To(Device::Cpu()).ToDoubleVector(), Amax(x, dims).ToDoubleVector());
      EXPECT_EQ(Norm(gx, INFINITY, dims, true).To(Device::Cpu()).ToDoubleVector(),
                Norm(x, INFINITY, dims, true).ToDoubleVector());
      ExpectClose(Norm(gx, 1.0, dims), Norm(x, 1.0, dims));
      ExpectClose(Norm(gx, 2.0, dims), Norm(x, 2.0, dims));
    }
  }
  const Tensor n = FromVector<float>({1, NAN, 3, 4, 5, 6}, {2, 3}).To(Device::Cuda(0));
  const std::vector<double> m = Amax(n, {1}).To(Device::Cpu()).ToDoubleVector();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_EQ(m[1], 6.0);
  testing::ExpectErrorContains([&] { Norm(n, 3.0); }, ErrorCode::kUnimplemented,
                               "norm: the CUDA kernel supports p = 1, 2 and inf, got p = 3");
  testing::ExpectErrorContains([&] { Amax(Zeros({2, 0}, DType::kFloat32, Device::Cuda(0)), {1}); },
                               ErrorCode::kInvalidArgument, "amax: cannot reduce over a zero-size dim");
}

TEST_F(ReductionCudaTest, MaxValuesIndicesAndBackwardEqualCpu) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = Values({4, 70, 6}, dtype, 1);
    for (int64_t dim : {0, 1, 2}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " dim " + std::to_string(dim));
      const auto [v, i] = Max(x, dim, /*keepdim=*/dim == 1);
      const auto [gv, gi] = Max(x.To(Device::Cuda(0)), dim, dim == 1);
      EXPECT_EQ(gv.To(Device::Cpu()).ToDoubleVector(), v.ToDoubleVector());
      EXPECT_EQ(gi.To(Device::Cpu()).ToVector<int64_t>(), i.ToVector<int64_t>());
    }
  }
  Tensor x = Values({5, 9}, DType::kFloat32, 2), gx = x.To(Device::Cuda(0));
  x.set_requires_grad(true);
  gx.set_requires_grad(true);
  Backward(Sum(Max(x, 1).first));
  Backward(Sum(Max(gx, 1).first));
  EXPECT_EQ(gx.grad().To(Device::Cpu()).ToDoubleVector(), x.grad().ToDoubleVector());
}

}  // namespace
}  // namespace tessel
