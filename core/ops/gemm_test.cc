// core/ops/gemm_test.cc — Gemm against a naive double loop for every operand layout (row-major,
// column-major, padded leading dims, size-1 dims), accumulate, K = 0, both split directions on 1–3
// threads, float64, run-to-run bit equality, concurrent callers, the BLAS kernels named for this CPU,
// float32 on both of its backends (oneDNN by default, OpenBLAS behind a test switch), the per-panel
// epilogue (every element seen exactly once, with its final value, one call per panel), and the split
// along K of weight-gradient shapes (the sum of per-slice products, in slice order).
#include "core/ops/gemm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/base/parallel.h"
#include "core/ops/vector_isa.h"

namespace tessel {
namespace {

// A matrix stored row- or column-major with `pad` extra elements per leading dimension.
template <typename T>
struct Stored {
  std::vector<T> buf;
  MatRef ref;
  T at(int64_t i, int64_t j) const {
    return buf[static_cast<size_t>(i * ref.row_stride + j * ref.col_stride)];
  }
};

template <typename T>
Stored<T> Make(int64_t rows, int64_t cols, bool col_major, int64_t pad, uint32_t seed) {
  Stored<T> s;
  const int64_t ld = (col_major ? rows : cols) + pad;
  s.buf.resize(static_cast<size_t>(std::max<int64_t>(1, ld * (col_major ? cols : rows))));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (T& x : s.buf) x = static_cast<T>(u(gen));
  s.ref = col_major ? MatRef{s.buf.data(), rows, cols, 1, ld} : MatRef{s.buf.data(), rows, cols, ld, 1};
  return s;
}

// c (row-major, ldc) against sum_k a(i, k) b(k, j) in double (+ c0 when accumulating).
template <typename T>
void ExpectProduct(const Stored<T>& a, const Stored<T>& b, const std::vector<T>& c, const std::vector<T>& c0,
                   int64_t ldc, bool accumulate, double tol) {
  const int64_t m = a.ref.rows, k = a.ref.cols, n = b.ref.cols;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = accumulate ? static_cast<double>(c0[static_cast<size_t>(i * ldc + j)]) : 0.0;
      for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a.at(i, p)) * static_cast<double>(b.at(p, j));
      ASSERT_NEAR(c[static_cast<size_t>(i * ldc + j)], want, tol * (1 + std::sqrt(static_cast<double>(k))))
          << "at (" << i << ", " << j << ") of [" << m << ", " << k << "] @ [" << k << ", " << n << "]";
    }
  }
}

struct Case {
  int64_t m, n, k;
  bool a_col, b_col;
  int64_t pad;
  bool accumulate;
  int threads;
};

template <typename T>
void CheckCase(const Case& cs, double tol) {
  SCOPED_TRACE(::testing::Message() << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " a_col=" << cs.a_col
                                    << " b_col=" << cs.b_col << " pad=" << cs.pad << " acc=" << cs.accumulate
                                    << " threads=" << cs.threads);
  NumThreadsGuard guard(cs.threads);
  const Stored<T> a = Make<T>(cs.m, cs.k, cs.a_col, cs.pad, 1);
  const Stored<T> b = Make<T>(cs.k, cs.n, cs.b_col, cs.pad, 2);
  const int64_t ldc = cs.n + cs.pad;
  std::vector<T> c0(static_cast<size_t>(std::max<int64_t>(1, cs.m * ldc)));
  std::mt19937 gen(3);
  for (T& x : c0) x = static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(gen));
  std::vector<T> c = c0;
  Gemm(sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64, a.ref, b.ref, c.data(), ldc, cs.accumulate);
  ExpectProduct(a, b, c, c0, ldc, cs.accumulate, tol);
  // The padding between rows of c is never written.
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = cs.n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "padding (" << i << ", " << j << ")";
  }
}

TEST(GemmTest, EveryOperandLayoutMatchesTheNaiveLoop) {
  for (bool a_col : {false, true}) {
    for (bool b_col : {false, true}) {
      for (int64_t pad : {0, 3}) {
        for (bool acc : {false, true}) {
          CheckCase<float>({7, 5, 9, a_col, b_col, pad, acc, 1}, 1e-5);
          CheckCase<double>({7, 5, 9, a_col, b_col, pad, acc, 1}, 1e-12);
        }
      }
    }
  }
}

TEST(GemmTest, SizeOneDimsAndEmptyContractionAreHandled) {
  for (bool acc : {false, true}) {
    CheckCase<float>({1, 6, 4, false, true, 0, acc, 1}, 1e-5);   // one output row
    CheckCase<float>({6, 1, 4, true, false, 0, acc, 1}, 1e-5);   // one output column
    CheckCase<float>({5, 6, 1, true, true, 0, acc, 1}, 1e-5);    // outer product
    CheckCase<float>({5, 6, 0, false, false, 2, acc, 1}, 1e-5);  // K = 0: c = 0, or c unchanged
  }
}

TEST(GemmTest, SplitsOverThreadsAlongRowsAndColumnsAndStillMatch) {
  // Large enough to split: rows split when m >= n, columns otherwise; odd sizes leave ragged panels.
  for (int threads : {2, 3}) {
    for (bool acc : {false, true}) {
      CheckCase<float>({301, 67, 131, false, true, 1, acc, threads}, 1e-5);  // rows
      CheckCase<float>({45, 333, 129, true, false, 0, acc, threads}, 1e-5);  // columns
      CheckCase<double>({200, 170, 100, true, true, 2, acc, threads}, 1e-12);
    }
  }
}

TEST(GemmTest, LongContractionsSplitAlongKAndStillMatch) {
  // K >= 2·max(M, N) (a weight gradient, K = tokens): split along K on 2 and 3 threads.
  for (int threads : {2, 3}) {
    for (bool a_col : {false, true}) {
      for (bool acc : {false, true}) {
        CheckCase<float>({70, 45, 800, a_col, !a_col, 1, acc, threads}, 1e-5);
        CheckCase<double>({45, 70, 700, a_col, a_col, 0, acc, threads}, 1e-12);
        CheckCase<float>({1, 100, 12000, a_col, a_col, 2, acc, threads}, 1e-5);  // one output row
        CheckCase<float>({100, 1, 12000, !a_col, a_col, 0, acc, threads}, 1e-5);  // one output column
      }
    }
  }
}

TEST(GemmTest, KSplitSumsTheSlicesProductsInSliceOrder) {
  // c = (c0 + A[:, s0]·B[s0, :]) + A[:, s1]·B[s1, :] (+ ...), each slice product single-threaded: the
  // split is deterministic, and this exact order is what a budget of `threads` computes.
  const int64_t m = 64, n = 48, k = 900;
  const Stored<float> a = Make<float>(m, k, /*col_major=*/true, 0, 8), b = Make<float>(k, n, false, 0, 9);
  std::vector<float> c0(m * n);
  std::mt19937 gen(10);
  for (float& x : c0) x = std::uniform_real_distribution<float>(-1, 1)(gen);
  for (int threads : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "threads=" << threads);
    std::vector<float> want = c0;
    {
      const NumThreadsGuard one(1);
      for (int t = 0; t < threads; ++t) {
        const int64_t kb = k * t / threads, ke = k * (t + 1) / threads;
        const MatRef sa{a.buf.data() + kb * m, m, ke - kb, 1, m};  // columns [kb, ke) of column-major a
        const MatRef sb{b.buf.data() + kb * n, ke - kb, n, n, 1};  // rows [kb, ke) of row-major b
        std::vector<float> partial(m * n, 0.0f);
        Gemm(DType::kFloat32, sa, sb, t == 0 ? want.data() : partial.data(), n, /*accumulate=*/t == 0);
        if (t > 0) {
          for (int64_t i = 0; i < m * n; ++i) want[i] += partial[i];
        }
      }
    }
    std::vector<float> got = c0;
    const NumThreadsGuard guard(threads);
    Gemm(DType::kFloat32, a.ref, b.ref, got.data(), n, /*accumulate=*/true);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

TEST(GemmTest, RepeatedRunsAreBitwiseEqualAndThreadCountsAgree) {
  const Stored<float> a = Make<float>(256, 192, false, 0, 4), b = Make<float>(192, 320, true, 0, 5);
  auto run = [&](int threads) {
    NumThreadsGuard guard(threads);
    std::vector<float> c(256 * 320);
    Gemm(DType::kFloat32, a.ref, b.ref, c.data(), 320, false);
    return c;
  };
  const std::vector<float> first = run(2);
  const std::vector<float> again = run(2);
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0);
  const std::vector<float> one = run(1);
  for (size_t i = 0; i < one.size(); ++i) ASSERT_NEAR(one[i], first[i], 1e-4) << i;
}

TEST(GemmTest, ConcurrentCallersEachGetTheExactSequentialProduct) {
  // Rank threads and parallel kernels call Gemm at once; a BLAS without locking corrupts its shared
  // buffers then (Debian's serial OpenBLAS: ~1% of such products came out wrong).
  const Stored<float> a = Make<float>(160, 160, false, 0, 6), b = Make<float>(160, 160, false, 0, 7);
  auto product = [&] {
    const NumThreadsGuard one(1);
    std::vector<float> c(160 * 160);
    Gemm(DType::kFloat32, a.ref, b.ref, c.data(), 160, false);
    return c;
  };
  const std::vector<float> want = product();
  std::atomic<int> wrong{0};
  const NumThreadsGuard two(2);
  for (int round = 0; round < 1000; ++round) {  // ParallelFor starts both calls at about the same moment
    ParallelFor(0, 2, 1, [&](int64_t, int64_t) {
      if (product() != want) ++wrong;
    });
  }
  EXPECT_EQ(wrong.load(), 0) << "of 2000 concurrent products";
}

TEST(GemmTest, BackendNamesOneDnnForFloat32AndOpenBlasForFloat64) {
  const std::string backend = GemmBackend();
  EXPECT_EQ(backend.rfind("float32: oneDNN sgemm (ISA ", 0), 0u) << backend;
  EXPECT_NE(backend.find(", 1 thread per call); float64: OpenBLAS ("), std::string::npos) << backend;
  EXPECT_EQ(backend.find("unknown"), std::string::npos) << backend;
  EXPECT_NE(backend.find(", 1 BLAS thread per call)"), std::string::npos) << backend;
}

// OpenBLAS falls back to its SSE3 (Prescott) kernels on a CPU model newer than its table; gemm.cc chooses again
// by the CPU's features ([NOTE: OpenBLAS's kernels]), so a CPU with AVX2 and FMA never runs float64 GEMMs there.
TEST(GemmTest, Float64KernelsMatchTheCpusVectorWidth) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) GTEST_SKIP() << "the kernels are the user's choice";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 with FMA";
  const std::string backend = GemmBackend();
  EXPECT_EQ(backend.find("Prescott"), std::string::npos) << backend;
  if (CpuHasAvx512() && backend.find("(Zen") == std::string::npos) {  // (OpenBLAS's AVX-512 cores)
    EXPECT_TRUE(backend.find("(SkylakeX kernels") != std::string::npos ||
                backend.find("(Cooperlake kernels") != std::string::npos ||
                backend.find("(SapphireRapids kernels") != std::string::npos) << backend;
  }
}

// Holds float32 GEMMs on OpenBLAS while alive.
class Float32OnOpenBlas {
 public:
  Float32OnOpenBlas() { SetFloat32GemmOnOpenBlasForTesting(true); }
  ~Float32OnOpenBlas() { SetFloat32GemmOnOpenBlasForTesting(false); }
};

TEST(GemmTest, Float32OnOpenBlasStillMatchesTheNaiveLoop) {
  const Float32OnOpenBlas on_openblas;
  EXPECT_EQ(GemmBackend().rfind("float32: OpenBLAS (forced for testing); float64: OpenBLAS (", 0), 0u);
  for (bool a_col : {false, true}) {
    for (bool b_col : {false, true}) {
      for (bool acc : {false, true}) {
        CheckCase<float>({7, 5, 9, a_col, b_col, 3, acc, 1}, 1e-5);
        CheckCase<float>({301, 67, 131, a_col, b_col, 1, acc, 2}, 1e-5);
      }
    }
  }
}

TEST(GemmTest, Float32NeverReadsCWhenNotAccumulating) {
  // A fresh output holds whatever the allocator left: NaNs there must not leak into c = a · b (a BLAS
  // that computed 0 · c would propagate them). Both float32 backends, split over two threads.
  const Stored<float> a = Make<float>(96, 80, false, 0, 6), b = Make<float>(80, 72, true, 0, 7);
  for (bool openblas : {false, true}) {
    SetFloat32GemmOnOpenBlasForTesting(openblas);
    NumThreadsGuard guard(2);
    std::vector<float> c(96 * 72, std::nanf("")), c0(c.size(), 0.0f);
    Gemm(DType::kFloat32, a.ref, b.ref, c.data(), 72, false);
    SetFloat32GemmOnOpenBlasForTesting(false);
    ExpectProduct(a, b, c, c0, 72, false, 1e-5);
  }
}

// Runs Gemm with an epilogue that records, per element, how often it was visited and the value it held
// then; returns the number of epilogue calls.
template <typename T>
int RunWithEpilogue(const Case& cs, std::vector<T>& c, std::vector<int>& visits, std::vector<T>& seen) {
  NumThreadsGuard guard(cs.threads);
  const Stored<T> a = Make<T>(cs.m, cs.k, cs.a_col, cs.pad, 1);
  const Stored<T> b = Make<T>(cs.k, cs.n, cs.b_col, cs.pad, 2);
  const int64_t ldc = cs.n;
  c.assign(static_cast<size_t>(std::max<int64_t>(1, cs.m * ldc)), T(0.5));
  visits.assign(c.size(), 0);
  seen.assign(c.size(), T(0));
  std::atomic<int> calls{0};
  std::vector<std::atomic<int>> counts(c.size());
  Gemm(sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64, a.ref, b.ref, c.data(), ldc, cs.accumulate,
       [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
         ++calls;
         for (int64_t i = r0; i < r1; ++i) {
           for (int64_t j = c0; j < c1; ++j) {
             ++counts[static_cast<size_t>(i * ldc + j)];
             seen[static_cast<size_t>(i * ldc + j)] = c[static_cast<size_t>(i * ldc + j)];
           }
         }
       });
  for (size_t i = 0; i < c.size(); ++i) visits[i] = counts[i].load();
  return calls.load();
}

TEST(GemmTest, EpilogueSeesEveryElementOnceWithItsFinalValueOncePerPanel) {
  struct EpilogueCase {
    Case cs;
    int calls;  // panels: one per thread here (too little work per thread for two)
  };
  const EpilogueCase cases[] = {
      {{301, 67, 131, false, true, 0, false, 1}, 1},  // one thread: one call for all of c
      {{301, 67, 131, false, true, 0, false, 2}, 2},  // row panels
      {{301, 67, 131, true, true, 0, true, 3}, 3},    // row panels, accumulating
      {{45, 333, 129, true, false, 0, false, 2}, 2},  // column panels
      {{5, 6, 0, false, false, 0, false, 2}, 1},      // K = 0: zeroed, then one call
      {{200, 40, 800, true, false, 0, true, 2}, 2},   // split along K: one call per summed row range
  };
  for (const EpilogueCase& e : cases) {
    const Case& cs = e.cs;
    SCOPED_TRACE(::testing::Message() << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " threads=" << cs.threads);
    std::vector<float> c, seen, plain(static_cast<size_t>(std::max<int64_t>(1, cs.m * cs.n)), 0.5f);
    std::vector<int> visits;
    EXPECT_EQ(RunWithEpilogue(cs, c, visits, seen), e.calls);
    {
      NumThreadsGuard guard(cs.threads);
      const Stored<float> a = Make<float>(cs.m, cs.k, cs.a_col, 0, 1), b = Make<float>(cs.k, cs.n, cs.b_col, 0, 2);
      Gemm(DType::kFloat32, a.ref, b.ref, plain.data(), cs.n, cs.accumulate);
    }
    for (size_t i = 0; i < static_cast<size_t>(cs.m * cs.n); ++i) {
      ASSERT_EQ(visits[i], 1) << "element " << i;
      ASSERT_EQ(seen[i], c[i]) << "element " << i << " changed after its epilogue";
      ASSERT_EQ(c[i], plain[i]) << "element " << i << " differs from the product without an epilogue";
    }
  }
  std::vector<double> c, seen;
  std::vector<int> visits;
  EXPECT_EQ(RunWithEpilogue<double>({200, 170, 100, true, true, 0, false, 2}, c, visits, seen), 2);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_TRUE(visits[i] == 1 && seen[i] == c[i]) << "float64 element " << i;
}

}  // namespace
}  // namespace tessel
