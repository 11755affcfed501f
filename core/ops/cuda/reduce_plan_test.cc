// core/ops/cuda/reduce_plan_test.cc — the CUDA sum / mean kernels' index math and order (cuda/reduce_plan.h,
// one block per output, tree merge), run on the host, equals the CPU ops "sum" and "mean" for every dims
// subset of a 3-d tensor, keepdim, a transposed (strided) input, and bfloat16 (fp32 1e-5 relative, bf16
// one ulp); sum_backward's broadcast strides reproduce the CPU op exactly.
#include "core/ops/cuda/reduce_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::cuda {
namespace {

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return testing::Wave(shape, dtype, seed, 3.0);
}

std::vector<char> Reduced(int64_t ndim, const std::vector<int64_t>& dims) {
  std::vector<char> r(ndim, dims.empty() ? 1 : 0);
  for (int64_t d : dims) r[d] = 1;
  return r;
}

template <typename T>
std::vector<double> EmulateReduce(const Tensor& x, const std::vector<int64_t>& dims, bool mean) {
  const ReducePlan p = ReducePlan::Make(x.sizes(), x.strides(), Reduced(x.dim(), dims));
  EXPECT_TRUE(p.ok());
  const int threads = BlockThreads(p.inner_n);
  const float scale = mean ? static_cast<float>(1.0 / static_cast<double>(p.inner_n)) : 1.0f;
  std::vector<T> out(p.num_out);
  for (int64_t o = 0; o < p.num_out; ++o) {
    const SumAcc s = EmulateBlockReduce<SumAcc>(
        threads, [&](int t) { return ReducePartial(static_cast<const T*>(x.raw_data()), p, o, t, threads); });
    StoreF(out.data(), o, s.sum * scale);
  }
  std::vector<double> wide(out.size());
  for (size_t i = 0; i < out.size(); ++i) wide[i] = LoadF(out.data(), static_cast<int64_t>(i));
  return wide;
}

void ExpectClose(const std::vector<double>& got, const Tensor& want_t) {
  const std::vector<double> want = want_t.ToDoubleVector();
  ASSERT_EQ(got.size(), want.size());
  const double rel = want_t.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], rel * std::abs(want[i]) + 1e-5) << i;
}

template <typename T>
void CheckAllDims(const Tensor& x) {
  const std::vector<std::vector<int64_t>> all = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {}};
  for (const auto& dims : all) {
    SCOPED_TRACE(::testing::PrintToString(dims));
    ExpectClose(EmulateReduce<T>(x, dims, false), Sum(x, dims));
    ExpectClose(EmulateReduce<T>(x, dims, true), Mean(x, dims, /*keepdim=*/true));
  }
}

TEST(ReducePlanTest, SumAndMeanEqualCpuForEveryDimsSubsetAndStridedInput) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = Values({4, 70, 6}, dtype, 1);  // 280 reduced elements for dims {0, 1}: > one block
    const Tensor base = Values({6, 70, 4}, dtype, 2);
    const Tensor xt = MakeDense(base.impl()->storage(), {4, 70, 6}, {1, 4, 280}, 0, dtype);  // dims 0 and 2 swapped
    ASSERT_FALSE(xt.is_contiguous());
    if (dtype == DType::kFloat32) {
      CheckAllDims<float>(x);
      CheckAllDims<float>(xt);
    } else {
      CheckAllDims<uint16_t>(x);
      CheckAllDims<uint16_t>(xt);
    }
  }
}

TEST(ReducePlanTest, SumBackwardBroadcastStridesReproduceCpuOp) {
  const Tensor x = Values({3, 4, 5}, DType::kFloat32, 1);
  for (bool keepdim : {false, true}) {
    const std::vector<int64_t> dims = {0, 2};
    const Tensor g = Values(Sum(x, dims, keepdim).sizes(), DType::kFloat32, 3);
    const Tensor want =
        Dispatch(GetOp("sum_backward"), std::vector<Tensor>{g},
                 Attrs().Set("shape", x.sizes()).Set("dims", dims).Set("keepdim", keepdim).Set("scale", 0.5))[0];
    const std::vector<int64_t> gs = ReducedGradStrides(g.strides(), Reduced(3, dims), keepdim);
    const std::vector<int64_t> os = {20, 5, 1};
    const auto calc =
        OffsetCalculator<2>::Make(x.sizes(), {std::span<const int64_t>(os), std::span<const int64_t>(gs)});
    std::vector<double> got(60);
    const float* pg = static_cast<const float*>(g.raw_data());
    for (int64_t i = 0; i < 60; ++i) {
      int64_t off[2];
      calc.Get(i, off);
      got[off[0]] = pg[off[1]] * 0.5f;
    }
    EXPECT_EQ(got, want.ToDoubleVector()) << keepdim;
  }
}

TEST(ReducePlanTest, SumToSizeReducedDimsReproduceCpuSumToSize) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = Values({4, 70, 6}, dtype, 1);
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{6}, {70, 1}, {4, 1, 6}, {1, 70, 6}}) {
      SCOPED_TRACE(::testing::PrintToString(shape) + " " + std::string(DTypeName(dtype)));
      const ReducePlan p = ReducePlan::Make(x.sizes(), x.strides(), SumToSizeReduced(x.sizes(), shape));
      const int threads = BlockThreads(p.inner_n);
      std::vector<double> got(p.num_out);
      for (int64_t o = 0; o < p.num_out; ++o) {
        const float sum = EmulateBlockReduce<SumAcc>(threads, [&](int t) {
                            if (dtype == DType::kFloat32) {
                              return ReducePartial(static_cast<const float*>(x.raw_data()), p, o, t, threads);
                            }
                            return ReducePartial(static_cast<const uint16_t*>(x.raw_data()), p, o, t, threads);
                          }).sum;
        got[o] = dtype == DType::kBFloat16 ? Bf16ToFloat(FloatToBf16(sum)) : sum;
      }
      ExpectClose(got, SumToSize(x, shape));
    }
  }
}

TEST(ReducePlanTest, PlanCountsOutputsAndReducedElements) {
  const std::vector<int64_t> sizes = {2, 3, 4}, strides = {12, 4, 1};
  const ReducePlan p = ReducePlan::Make(sizes, strides, Reduced(3, {0, 2}));
  EXPECT_EQ(p.num_out, 3);
  EXPECT_EQ(p.inner_n, 8);
  int64_t base = 0, off = 0;
  p.outer.Get(2, &base);
  p.inner.Get(5, &off);  // reduced index 5 = (d0 = 1, d2 = 1)
  EXPECT_EQ(base, 8);
  EXPECT_EQ(off, 13);
}

// The column sum takes sums over the rows of a contiguous [rows, cols] layout with at least 64 rows, and
// nothing else (a strided input, an inner dim reduced, a middle dim kept with a gap, too few rows).
TEST(ReducePlanTest, ColumnSumTakesOnlyLeadingRowsOfAContiguousLayout) {
  const std::vector<int64_t> sizes = {8, 16, 24}, strides = {384, 24, 1};
  EXPECT_TRUE(IsColumnSum(ReducePlan::Make(sizes, strides, Reduced(3, {0, 1}))));
  EXPECT_FALSE(IsColumnSum(ReducePlan::Make(sizes, strides, Reduced(3, {0}))));      // 8 rows
  EXPECT_FALSE(IsColumnSum(ReducePlan::Make(sizes, strides, Reduced(3, {2}))));      // the inner dim
  EXPECT_FALSE(IsColumnSum(ReducePlan::Make(sizes, strides, Reduced(3, {0, 2}))));   // kept dim not unit-stride
  const std::vector<int64_t> transposed = {1, 8, 128};                               // [8, 16, 24] read column-major
  EXPECT_FALSE(IsColumnSum(ReducePlan::Make(sizes, transposed, Reduced(3, {0, 1}))));
  EXPECT_EQ(ColumnSumChunks(8192, 768), 22);   // 24 column blocks x 22 chunks >= 528 blocks
  EXPECT_EQ(ColumnSumChunks(8192, 32768), 1);  // enough column blocks already
  EXPECT_EQ(ColumnSumChunks(100, 32), 4);      // at least 32 rows per chunk
}

}  // namespace
}  // namespace tessel::cuda
