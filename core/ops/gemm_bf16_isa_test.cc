// core/ops/gemm_bf16_isa_test.cc — what an AVX2-only CPU (a CI machine) sees, on any CPU: with oneDNN's
// ISA capped at AVX2 (ONEDNN_MAX_CPU_ISA, read once when oneDNN first runs, so set before any Gemm),
// bf16 GEMMs report the fp32 fallback and still compute the exact-product, fp32-summed result, and
// fp32 GEMMs run oneDNN's AVX2 sgemm kernels and match a double-precision loop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/ops/gemm.h"
#include "core/tensor/dtype.h"

namespace tessel {
namespace {

TEST(GemmBf16IsaTest, AvxTwoCapTakesTheFallbackAndStaysCorrect) {
  ASSERT_EQ(setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1), 0);
  EXPECT_FALSE(Bf16GemmIsNative());
  EXPECT_EQ(Bf16GemmBackend(), "fp32 fallback (oneDNN ISA avx2 has neither AMX-BF16 nor AMD's AVX512-BF16)");
  // a [3, 5] row-major, b [5, 2] column-major, values exact in bf16 (small integers / 4).
  std::vector<uint16_t> a(15), b(10);
  for (int i = 0; i < 15; ++i) a[i] = FloatToBFloat16Bits(static_cast<float>(i - 7) / 4);
  for (int i = 0; i < 10; ++i) b[i] = FloatToBFloat16Bits(static_cast<float>(3 - i) / 4);
  std::vector<float> c(6, 1.0f);
  Gemm(DType::kBFloat16, MatRef{a.data(), 3, 5, 5, 1}, MatRef{b.data(), 5, 2, 1, 5}, c.data(), 2, true);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) {
      double want = 1;
      for (int p = 0; p < 5; ++p) want += (static_cast<double>(i * 5 + p - 7) / 4) * (static_cast<double>(3 - (j * 5 + p)) / 4);
      EXPECT_EQ(c[i * 2 + j], want) << i << ", " << j;  // small dyadic values: every sum is exact
    }
  }
}

TEST(GemmBf16IsaTest, AvxTwoCapRunsTheAvx2SgemmWithFloat32Accuracy) {
  ASSERT_EQ(setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1), 0);
  EXPECT_NE(GemmBackend().find("float32: oneDNN sgemm (ISA avx2,"), std::string::npos) << GemmBackend();
  // Sizes that fill no kernel block exactly; a [m, k] row-major, b [k, n] column-major, c accumulated.
  const int64_t m = 37, k = 29, n = 41;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (int64_t i = 0; i < m * k; ++i) a[i] = std::sin(0.37 * static_cast<double>(i));
  for (int64_t i = 0; i < k * n; ++i) b[i] = std::cos(0.23 * static_cast<double>(i));
  for (int64_t i = 0; i < m * n; ++i) c[i] = 0.5f * static_cast<float>(i % 3);
  const std::vector<float> c0 = c;
  Gemm(DType::kFloat32, MatRef{a.data(), m, k, k, 1}, MatRef{b.data(), k, n, 1, k}, c.data(), n, true);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = c0[i * n + j];
      for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a[i * k + p]) * b[j * k + p];
      EXPECT_NEAR(c[i * n + j], want, 1e-5 * (1 + std::abs(want))) << i << ", " << j;
    }
  }
}

}  // namespace
}  // namespace tessel
