// core/ops/gemm_bf16_test.cc — Gemm with bf16 operands (fp32 product) against a double loop on the same
// bf16 values, on the native oneDNN path (where this CPU has AMX-BF16) and on the forced fp32 fallback
// (any CPU): odd shapes, row-/column-major operands with padded leading dims, accumulate, K = 0, the
// thread split (output panels, and along K), concurrent callers, and the backend names.
//
// Tolerance: bf16 × bf16 products are exact in fp32, so the only error is fp32 summation over K:
// |c - ref| <= 2 K u Σ_p |a_ip b_pj| (+ u |c0| when accumulating), u = 2^-24 (twice the classic
// K u bound, for the two-product steps of AMX's dot products).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/base/parallel.h"
#include "core/ops/gemm.h"
#include "core/ops/gemm_dnnl.h"
#include "core/tensor/dtype.h"

namespace tessel {
namespace {

constexpr double kU32 = 1.0 / (1 << 24);

struct Bf16Mat {
  std::vector<uint16_t> buf;
  MatRef ref;
  double at(int64_t i, int64_t j) const {
    return BFloat16BitsToFloat(buf[static_cast<size_t>(i * ref.row_stride + j * ref.col_stride)]);
  }
};

Bf16Mat Make(int64_t rows, int64_t cols, bool col_major, int64_t pad, uint32_t seed) {
  Bf16Mat s;
  const int64_t ld = (col_major ? rows : cols) + pad;
  s.buf.resize(static_cast<size_t>(std::max<int64_t>(1, ld * (col_major ? cols : rows))));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  for (uint16_t& x : s.buf) x = FloatToBFloat16Bits(u(gen));
  s.ref = col_major ? MatRef{s.buf.data(), rows, cols, 1, ld} : MatRef{s.buf.data(), rows, cols, ld, 1};
  return s;
}

void ExpectProduct(const Bf16Mat& a, const Bf16Mat& b, const std::vector<float>& c, const std::vector<float>& c0,
                   int64_t ldc, bool accumulate) {
  const int64_t m = a.ref.rows, k = a.ref.cols, n = b.ref.cols;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      double want = accumulate ? c0[at] : 0.0, mag = accumulate ? std::abs(c0[at]) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        want += a.at(i, p) * b.at(p, j);
        mag += std::abs(a.at(i, p) * b.at(p, j));
      }
      ASSERT_NEAR(c[at], want, 2 * (k + 1) * kU32 * mag)
          << "at (" << i << ", " << j << ") of [" << m << ", " << k << "] @ [" << k << ", " << n << "]";
    }
  }
}

// An m × n × k product; layout bits: 1 a column-major, 2 b column-major, 4 leading dims padded by 3,
// 8 accumulate into c.
struct Case {
  int64_t m, n, k;
  int layout;
};

const std::vector<Case> kCases = {
    {1, 1, 1, 0},     {37, 5, 3, 1},    {3, 129, 67, 2 | 4 | 8}, {65, 1, 31, 1 | 2 | 4},  {1, 77, 129, 2 | 8},
    {130, 70, 300, 2}, {257, 300, 96, 1 | 4 | 8}, {96, 520, 64, 1 | 2}, {17, 33, 0, 0},
    // K >= 2·max(M, N): split along K on 2 and 3 threads (gemm.cc, NOTE: K split).
    {60, 40, 600, 1 | 4 | 8}, {1, 90, 12000, 2 | 8},
};

// Runs one case; the padding columns of c are never written.
void RunCase(const Case& cs, uint32_t seed) {
  const bool a_col = cs.layout & 1, b_col = cs.layout & 2, accumulate = cs.layout & 8;
  const int64_t pad = cs.layout & 4 ? 3 : 0, ldc = cs.n + pad;
  SCOPED_TRACE(testing::Message() << cs.m << "x" << cs.n << "x" << cs.k << " layout " << cs.layout);
  const Bf16Mat a = Make(cs.m, cs.k, a_col, pad, seed), b = Make(cs.k, cs.n, b_col, pad, seed + 1);
  std::vector<float> c(static_cast<size_t>(cs.m * ldc));
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 7) - 3.0f;
  const std::vector<float> c0 = c;
  Gemm(DType::kBFloat16, a.ref, b.ref, c.data(), ldc, accumulate);
  ExpectProduct(a, b, c, c0, ldc, accumulate);
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = cs.n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
  }
}

// Runs every case on 1 to 3 threads.
void RunCases() {
  uint32_t seed = 1;
  for (int threads : {1, 2, 3}) {
    const NumThreadsGuard guard(threads);
    SCOPED_TRACE(testing::Message() << "threads " << threads);
    for (const Case& cs : kCases) RunCase(cs, seed += 2);
  }
}

class FallbackGuard {
 public:
  FallbackGuard() { SetBf16GemmFallbackForTesting(true); }
  ~FallbackGuard() { SetBf16GemmFallbackForTesting(false); }
};

TEST(GemmBf16Test, NativePathMatchesDoubleLoopsOnEveryLayout) {
  if (!Bf16GemmIsNative()) GTEST_SKIP() << "no native bf16 GEMM here: " << Bf16GemmBackend();
  RunCases();
}

// The brgemm kernel a native bf16 GEMM takes: AMX tiles, else AVX512-BF16 (an AMD CPU: DnnlHasFastBf16).
std::string NativeKernel() {
  return DnnlIsa() == "avx512_core_amx" ? "brg:avx512_core_amx_bf16" : "brg:avx512_core_bf16";
}

TEST(GemmBf16Test, LargeProductsOfEveryLayoutRunOnOneBrgemmKernel) {
  if (!Bf16GemmIsNative()) GTEST_SKIP() << "no native bf16 GEMM here: " << Bf16GemmBackend();
  // Padded operands, column-major row panels and a padded c would each send oneDNN 2.6 to its generic
  // gemm:jit kernel; gemm_dnnl.cc compacts them, so every shape cached here is a brgemm one.
  DnnlBf16ClearCacheForTesting();
  uint32_t seed = 100;
  for (int threads : {1, 2}) {
    const NumThreadsGuard guard(threads);
    SCOPED_TRACE(testing::Message() << "threads " << threads);
    for (int layout = 0; layout < 16; ++layout) {
      RunCase({160, 96, 128, layout}, seed += 2);
      RunCase({96, 160, 128, layout}, seed += 2);
    }
  }
  const std::string impl = DnnlBf16Impl();
  EXPECT_EQ(impl.rfind(NativeKernel() + " ×", 0), 0u) << impl;
  EXPECT_EQ(impl.find(", "), std::string::npos) << "one kernel for every shape: " << impl;
}

TEST(GemmBf16Test, ForcedFallbackMatchesDoubleLoopsOnEveryLayout) {
  const FallbackGuard fallback;
  EXPECT_FALSE(Bf16GemmIsNative());
  EXPECT_EQ(Bf16GemmBackend(), "fp32 fallback (forced for testing)");
  RunCases();
}

TEST(GemmBf16Test, BackendNamesTheIsaAndAgreesWithIsNative) {
  const std::string backend = Bf16GemmBackend();
  if (Bf16GemmIsNative()) {
    const bool named = backend.rfind("oneDNN (ISA avx512_core_amx", 0) == 0 ||
                       backend.rfind("oneDNN (ISA avx512_core_bf16", 0) == 0;
    EXPECT_TRUE(named) << backend;
  } else {
    EXPECT_EQ(backend.rfind("fp32 fallback (oneDNN ISA ", 0), 0u) << backend;
    EXPECT_NE(backend.find("has neither AMX-BF16 nor AMD's AVX512-BF16"), std::string::npos) << backend;
  }
}

TEST(GemmBf16Test, ConcurrentCallersGetTheSingleCallerResultBitForBit) {
  const Bf16Mat a = Make(96, 80, false, 0, 41), b = Make(80, 72, true, 0, 42);
  std::vector<float> want(96 * 72);
  Gemm(DType::kBFloat16, a.ref, b.ref, want.data(), 72, false);
  std::vector<std::vector<float>> got(4, std::vector<float>(96 * 72));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      SetNumThreads(1);
      for (int rep = 0; rep < 25; ++rep) Gemm(DType::kBFloat16, a.ref, b.ref, got[t].data(), 72, false);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], want) << "thread " << t;
}

}  // namespace
}  // namespace tessel
