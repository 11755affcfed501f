// core/ops/cuda/gemm_plan_test.cc — PlanMatmul's cuBLASLt descriptors (cuda/gemm_plan.h), executed by a
// reference column-major GEMM with cuBLAS's documented (op, ld, strided batch) semantics, reproduce the CPU
// "matmul" op for the products the CUDA linear / matmul kernels issue: x · wᵀ, dgrad g · w, wgrad gᵀ · x
// summed over the batch, batched and batched-transposed products, a transposed 2-d operand; products
// it cannot express in place (broadcast batches, no unit stride) are refused.
#include "core/ops/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/matmul.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::cuda {
namespace {

Tensor Values(const std::vector<int64_t>& shape, int seed) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.731 * i + seed) + 0.5 * std::cos(1.37 * i * seed);
  return FromDoubles(v, shape, DType::kFloat32);
}

// op(X)(i, j) for X column-major rows x cols with leading dim ld (cuBLAS semantics).
double OpAt(const float* p, const LtOperand& o, int64_t i, int64_t j) {
  return o.trans ? p[j + i * o.ld] : p[i + j * o.ld];
}

// D = op(A) op(B) per batch entry, D column-major m x n with ldc = m, entries stride_c apart.
std::vector<double> ReferenceLt(const LtPlan& p, const float* lt_a, const float* lt_b) {
  std::vector<double> d(p.batch * p.m * p.n, 0.0);
  for (int64_t q = 0; q < p.batch; ++q) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < p.k; ++k)
          s += OpAt(lt_a + q * p.stride_a, p.a, i, k) * OpAt(lt_b + q * p.stride_b, p.b, k, j);
        d[q * p.stride_c + i + j * p.m] = s;
      }
    }
  }
  return d;
}

void CheckLikeCpu(const Tensor& a, const Tensor& b, bool ta, bool tb, bool sum_batch) {
  const auto [as, ast] = ResolvedOperand(a.sizes(), a.strides(), ta);
  const auto [bs, bst] = ResolvedOperand(b.sizes(), b.strides(), tb);
  const std::optional<LtPlan> p = PlanMatmul(as, ast, bs, bst, sum_batch);
  ASSERT_TRUE(p.has_value());
  const std::vector<double> got =
      ReferenceLt(*p, static_cast<const float*>(b.raw_data()), static_cast<const float*>(a.raw_data()));
  const Attrs attrs = Attrs().Set("transpose_a", ta).Set("transpose_b", tb).Set("sum_batch", sum_batch);
  const std::vector<double> want = Dispatch(GetOp("matmul"), std::vector<Tensor>{a, b}, attrs)[0].ToDoubleVector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(GemmPlanTest, LinearForwardDgradAndWgradMatchCpuMatmul) {
  const Tensor x = Values({2, 3, 4}, 1), w = Values({5, 4}, 2), g = Values({2, 3, 5}, 3);
  CheckLikeCpu(x, w, false, true, false);   // y = x · wᵀ, batch folded into rows: one GEMM
  CheckLikeCpu(g, w, false, false, false);  // dgrad g · w
  CheckLikeCpu(g, x, true, false, true);    // wgrad Σ_b g[b]ᵀ · x[b] = [out, B*T] · [B*T, in]
  const auto [gs, gst] = ResolvedOperand(g.sizes(), g.strides(), true);
  EXPECT_EQ(PlanMatmul(gs, gst, x.sizes(), x.strides(), true)->k, 6);                  // the batch went into K
  EXPECT_EQ(PlanMatmul(x.sizes(), x.strides(), w.sizes(), w.strides(), false)->n, 6);  // ... into M
}

TEST(GemmPlanTest, BatchedAndTransposedProductsMatchCpuMatmul) {
  CheckLikeCpu(Values({2, 3, 4}, 1), Values({2, 4, 5}, 2), false, false, false);
  CheckLikeCpu(Values({2, 3, 4}, 1), Values({2, 5, 4}, 2), false, true, false);  // q · kᵀ
  CheckLikeCpu(Values({2, 4, 3}, 1), Values({2, 4, 5}, 2), true, false, false);
  CheckLikeCpu(Values({4, 3}, 1), Values({4, 5}, 2), true, false, false);
  CheckLikeCpu(Values({1, 4}, 1), Values({4, 1}, 2), false, false, false);  // degenerate rows / cols
  const auto p = PlanMatmul(std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{12, 4, 1},
                            std::vector<int64_t>{2, 4, 5}, std::vector<int64_t>{20, 5, 1}, false);
  EXPECT_EQ(p->batch, 2);
  EXPECT_EQ(p->stride_c, 15);
}

TEST(GemmPlanTest, BroadcastBatchesAndNonUnitStridesAreRefused) {
  EXPECT_FALSE(PlanMatmul(std::vector<int64_t>{1, 3, 4}, std::vector<int64_t>{12, 4, 1}, std::vector<int64_t>{2, 4, 5},
                          std::vector<int64_t>{20, 5, 1}, false));
  EXPECT_FALSE(PlanMatmul(std::vector<int64_t>{3, 4}, std::vector<int64_t>{8, 2}, std::vector<int64_t>{4, 5},
                          std::vector<int64_t>{5, 1}, false));
}

}  // namespace
}  // namespace tessel::cuda
