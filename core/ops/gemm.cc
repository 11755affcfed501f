// core/ops/gemm.cc — Gemm on oneDNN's sgemm (float32) and OpenBLAS (float64), split over tessel's threads here.
//
// Why these libraries. Measured on this machine kind (Intel Xeon with AVX-512 and AMX, 2 vCPUs, other
// builds running, so ranges), sgemm GFLOP/s on one thread, interleaved in one process:
//   shape (M×N×K)          OpenBLAS   oneDNN 2.6   BLIS 0.9   Eigen (-march=x86-64-v3)
//   2048×2048×2048         174–177    178–191      112–114    100–104
//   GPT step (2048×768×256, 2048×256×1024, 768×256×2048 …)  155–170  158–195  103–116  87–105
// Remeasured on a quiet machine (issue 16, 1 thread, the reference GPT step's shapes): oneDNN's
// dnnl_sgemm 197–209 against OpenBLAS 167–186 on six of seven shapes (152 vs 171 on the seventh), and
// the whole step ran ~9% faster on it. Part of OpenBLAS's gap is structural: for beta = 0 it first
// zeroes c (sgemm_beta → memset, ~3.6% of the step) and its kernel then accumulates into c, where
// oneDNN's kernels store the first product. So float32 runs on dnnl_sgemm. float64 stays on OpenBLAS
// (oneDNN has no float64 GEMM); OpenBLAS picks its kernels when the library loads (SkylakeX here,
// Haswell/Zen on AVX2-only CPUs), and oneDNN's JIT picks its ISA at run time, so one x86-64-v3 build
// reaches each machine's vector width either way.
//
// NOTE: threads. OpenBLAS's own pool is set to one thread (SingleThreadedBlas), and each oneDNN call
// runs with the calling thread's OpenMP team capped at one (gemm_dnnl.cc), so each call runs on the
// calling thread, and we split a large GEMM ourselves into one or two independent row or column
// panels per thread of NumThreads() (ParallelFor), or, for a weight gradient, along K (below). So the
// per-rank budget of core/base/parallel.h is the only scheduler: several ranks in one process, or a GEMM
// inside a parallel kernel, cannot oversubscribe the cores, and no BLAS thread pool spins against
// tessel's own workers. The split depends only on the shape and the thread count, so every output
// element is summed in the same order on every run with the same budget. We link the pthread
// build, not the serial one: Debian builds the serial library without USE_LOCKING, and concurrent
// calls then corrupt each other (third_party/system/openblas.BUILD; GemmTest.ConcurrentCallers...).
//
// NOTE: K split. When the contraction is the longest dim by far (K >= 2·max(M, N): a weight gradient
// dW = dYᵀ·X, whose K is the batch's tokens), thread t multiplies the t-th slice of K into its own
// partial product (slice 0 straight into c) and the partials are then added into c, row range t by
// thread t. Each thread then reads only its slice of both operands, the rows of dY and X that the same
// thread produced in the ops before (with one rank using every core, ParallelFor starts thread t on the
// t-th slice of every call), the way one rank per core computes its own batch's gradient and the ranks
// add them. Split by output panels, each thread instead read all tokens of the shared operand, half of
// them from the other core's cache: in the reference GPT step (issue 16, threads_vs_ranks) its
// weight-gradient GEMMs ran 11–13% slower on 1 rank × 2 threads than on 2 ranks × 1 thread, and 1.5–5%
// slower split along K. The partials cost (threads - 1)·M·N elements of scratch (capped by
// kKSplitScratchBytes) and one pass that adds them; the sum order is fixed by the slice index, not by
// which thread ran a slice.
//
// NOTE: epilogues (gemm.h, [Note: GEMM epilogue]). Every dtype runs the epilogue per panel on the thread
// that computed it, right after the panel's library call: float32 and float64 through the same panel
// loop, native bf16 likewise (its product is fp32), and the bf16 fallback through the float32 path it
// widens into. Splitting a panel further for the epilogue's sake would repack the shared operand per
// piece (oneDNN packs it on every call), so panels stay as the thread split makes them. A K split runs
// the epilogue on each row range right after that range's partials were added.
//
// bfloat16 (bf16 operands, fp32 product): oneDNN's matmul (gemm_dnnl.h) where the CPU has AMX-BF16
// or is an AMD CPU with AVX512-BF16 (DnnlHasFastBf16 gives the measurements), called per panel exactly
// like sgemm above, single-threaded; elsewhere (AVX2-only, or Intel's AVX512 without AMX, where
// oneDNN's bf16 kernels measured slower than sgemm) the operands are widened to fp32 and take the
// float32 path.
#include "core/ops/gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/ops/gemm_dnnl.h"
#include "core/ops/vector_isa.h"

// The CBLAS functions we call (OpenBLAS's cblas.h declares them with enum parameters, passed as int).
// Declared here rather than included so the BLAS headers never become inputs of other compile actions
// (third_party/system/openblas.BUILD).
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc);
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
// A DYNAMIC_ARCH OpenBLAS's kernel selection (weak: a build without it leaves them null, and its kernels alone)
__attribute__((weak)) void gotoblas_dynamic_init(void);
__attribute__((weak)) void gotoblas_dynamic_quit(void);
}

namespace tessel {
namespace {

// CBLAS enum values (cblas.h: CblasRowMajor, CblasNoTrans, CblasTrans).
constexpr int kRowMajor = 101;
enum BlasTrans : int { kNoTrans = 111, kTrans = 112 };

// A GEMM is split over threads only with at least this many multiply-adds per thread (waking a pool
// worker costs a few microseconds; this is ~10 µs of work at 100 GFLOP/s).
constexpr int64_t kMinMacsPerThread = int64_t{1} << 19;
// Panels are multiples of this many rows/columns (the microkernels' register-tile widths divide it).
constexpr int64_t kPanelAlign = 32;
// Elements of the operand every panel reads (and packs) below which a GEMM gets two panels per thread.
constexpr int64_t kSmallSharedOperand = int64_t{1} << 20;
// ...and the multiply-adds per thread above which it does: below, each call's fixed cost (packing the
// shared operand, the library's entry) outweighs the balance a second panel buys. Each panel is one
// library call, and the small model of threads_vs_ranks (issue 16) ran its 1–4 M-MAC GEMMs up to 1.5×
// slower on 4 panels than on 2; the reference step's 50–270 M-MAC ones ran 3–8% slower on 4 (interleaved
// runs on the 2-vCPU Xeon, e.g. its MLP projection's input gradient [2048, 256] · [256, 1024] 2.99 vs
// 2.78 ms; threads_vs_ranks 0.937–0.954 vs 0.960–0.972). So only GEMMs of 0.5 G multiply-adds per
// thread and up whose shared operand is small (tall and skinny: 1024³ on 2 threads qualifies, 2048³
// does not) take a second panel.
constexpr int64_t kTwoPanelMinMacsPerThread = int64_t{1} << 29;

// The K split (NOTE above) takes K slices at least this deep (the kernels' K blocking)...
constexpr int64_t kMinKSplitDepth = 128;
// ...and at most this much scratch for the partial products of threads 1..T-1.
constexpr int64_t kKSplitScratchBytes = int64_t{32} << 20;

bool IsRowMajor(const MatRef& m) {
  return (m.col_stride == 1 || m.cols == 1) && (m.rows == 1 || m.row_stride >= m.cols);
}
bool IsColMajor(const MatRef& m) {
  return (m.row_stride == 1 || m.rows == 1) && (m.cols == 1 || m.col_stride >= m.rows);
}

// One operand as BLAS sees it in row-major order: transposed or not, with its leading dimension.
struct BlasOperand {
  const char* data;
  BlasTrans trans;
  int64_t ld;
};

BlasOperand ToBlas(const MatRef& m) {
  const char* p = static_cast<const char*>(m.data);
  if (IsRowMajor(m)) return {p, kNoTrans, m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.row_stride};
  return {p, kTrans, m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.col_stride};
}

// The address of element (row, col) of an operand given as stored (before any transpose).
const char* At(const BlasOperand& op, int64_t row, int64_t col, int64_t esz) {
  const int64_t offset = op.trans == kNoTrans ? row * op.ld + col : col * op.ld + row;
  return op.data + offset * esz;
}

// NOTE: OpenBLAS's kernels. A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU family and model when it loads,
// and a model newer than its table falls back to its Prescott (SSE3) kernels: Debian 12's 0.3.21 does so on the
// Emerald Rapids Xeon (family 6 model 207), where float64 GEMMs then ran at 12.8 GFLOP/s on one thread against
// MKL's 47.7 and numpy-from-PyPI's 57.8. So where it fell back so, and OPENBLAS_CORETYPE (the user's choice)
// is unset, the kernels are chosen again by what the CPU can run: SkylakeX with AVX-512 (F, VL, DQ, BW; the
// OS saving its registers), Haswell with AVX2 and FMA. Through OpenBLAS's own entry points (quit, then init
// with OPENBLAS_CORETYPE named for the call), at load time: after libopenblas chose, before any BLAS call.
const char* OpenBlasCoreFor(const char* detected) {
  if (detected == nullptr || std::strcmp(detected, "Prescott") != 0 || std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    return nullptr;
  }
  if (CpuHasAvx512()) return "SkylakeX";
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : nullptr;
}

const bool kOpenBlasCoreChosen = [] {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return false;
  const char* core = OpenBlasCoreFor(openblas_get_corename());
  if (core == nullptr) return false;
  setenv("OPENBLAS_CORETYPE", core, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  return true;
}();

// Sets OpenBLAS's pool to one thread, once per process, before the first GEMM.
void SingleThreadedBlas() {
  static const bool kOnce = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)kOnce;
}

// Test-only (SetFloat32GemmOnOpenBlasForTesting): float32 products on OpenBLAS instead of oneDNN.
std::atomic<bool> force_float32_openblas{false};

// One single-threaded BLAS call: c [m, n] (+)= a [m, k] · b [k, n].
void BlasCall(DType dtype, const BlasOperand& a, const BlasOperand& b, char* c, int64_t ldc, int64_t m, int64_t n,
              int64_t k, bool accumulate) {
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int lda = static_cast<int>(a.ld), ldb = static_cast<int>(b.ld), ildc = static_cast<int>(ldc);
  if (dtype == DType::kFloat32 && !force_float32_openblas.load(std::memory_order_relaxed)) {
    return DnnlSgemm(a.trans == kTrans, b.trans == kTrans, m, n, k, reinterpret_cast<const float*>(a.data), a.ld,
                     reinterpret_cast<const float*>(b.data), b.ld, reinterpret_cast<float*>(c), ldc, accumulate);
  }
  if (dtype == DType::kFloat32) {
    cblas_sgemm(kRowMajor, a.trans, b.trans, im, in, ik, 1.0f, reinterpret_cast<const float*>(a.data), lda,
                reinterpret_cast<const float*>(b.data), ldb, accumulate ? 1.0f : 0.0f, reinterpret_cast<float*>(c),
                ildc);
  } else {
    cblas_dgemm(kRowMajor, a.trans, b.trans, im, in, ik, 1.0, reinterpret_cast<const double*>(a.data), lda,
                reinterpret_cast<const double*>(b.data), ldb, accumulate ? 1.0 : 0.0, reinterpret_cast<double*>(c),
                ildc);
  }
}

// Threads for an m × n × k GEMM: the budget, bounded by the work and by the split dimension's panels.
// bf16 products split only their rows (split_extent = m): oneDNN's brgemm kernel wants a dense output,
// and a column panel of c is not (gemm_dnnl.cc).
int SplitThreads(int64_t m, int64_t n, int64_t k, int64_t split_extent) {
  if (NumThreads() <= 1 || omp_in_parallel()) return 1;
  const int64_t macs = m * n * k;
  const int64_t panels = (split_extent + kPanelAlign - 1) / kPanelAlign;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({NumThreads(), macs / kMinMacsPerThread, panels})));
}

// Bytes per element of the product c: float32 for bf16 operands, else the operands' type.
int64_t ProductElementSize(DType dtype) { return dtype == DType::kBFloat16 ? 4 : ElementSize(dtype); }

// Threads for splitting an m × n × k GEMM along K (NOTE: K split), or 1 when it should not be.
int KSplitThreads(int64_t m, int64_t n, int64_t k, int64_t esz_c) {
  if (NumThreads() <= 1 || omp_in_parallel() || k < 2 * std::max(m, n)) return 1;
  const int64_t by_scratch = 1 + kKSplitScratchBytes / (m * n * esz_c);
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({NumThreads(), m * n * k / kMinMacsPerThread, k / kMinKSplitDepth, by_scratch})));
}

// c[r0, r1) += the partials' rows [r0, r1) (each partial row-major [m, n]).
template <typename T>
void AddPartialRows(const T* partials, int count, int64_t mn, int64_t n, T* c, int64_t ldc, int64_t r0, int64_t r1) {
  for (int64_t i = r0; i < r1; ++i) {
    T* row = c + i * ldc;
    for (int p = 0; p < count; ++p) {
      const T* src = partials + p * mn + i * n;
      for (int64_t j = 0; j < n; ++j) row[j] += src[j];
    }
  }
}

void ZeroRows(void* c, int64_t ldc, int64_t m, int64_t n, int64_t esz) {
  char* p = static_cast<char*>(c);
  for (int64_t i = 0; i < m; ++i) std::memset(p + i * ldc * esz, 0, static_cast<size_t>(n * esz));
}

std::atomic<bool> force_bf16_fallback{false};

// The operand as a MatRef of rows × cols (strides from its BLAS layout; ld already normalized).
MatRef ToMat(const BlasOperand& op, int64_t rows, int64_t cols) {
  if (op.trans == kNoTrans) return MatRef{op.data, rows, cols, op.ld, 1};
  return MatRef{op.data, rows, cols, 1, op.ld};
}

// A bf16 matrix widened to a row-major fp32 copy.
std::vector<float> WidenBf16(const MatRef& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  const auto* p = static_cast<const uint16_t*>(m.data);
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t j = 0; j < m.cols; ++j) out[i * m.cols + j] = BFloat16BitsToFloat(p[i * m.row_stride + j * m.col_stride]);
  }
  return out;
}

// The fallback: c (fp32) (+)= widen(a) · widen(b) through the float32 path (which runs the epilogue).
void Bf16ViaFloat32(const MatRef& a, const MatRef& b, void* c, int64_t ldc, bool accumulate,
                    const GemmEpilogue& epilogue) {
  const std::vector<float> wa = WidenBf16(a), wb = WidenBf16(b);
  const MatRef fa{wa.data(), a.rows, a.cols, a.cols, 1}, fb{wb.data(), b.rows, b.cols, b.cols, 1};
  Gemm(DType::kFloat32, fa, fb, c, ldc, accumulate, epilogue);
}

// One single-threaded product of any supported dtype: c [m, n] (+)= a [m, k] · b [k, n].
void PanelCall(DType dtype, const BlasOperand& a, const BlasOperand& b, char* c, int64_t ldc, int64_t m, int64_t n,
               int64_t k, bool accumulate) {
  if (dtype != DType::kBFloat16) return BlasCall(dtype, a, b, c, ldc, m, n, k, accumulate);
  const MatRef ma = ToMat(a, m, k), mb = ToMat(b, k, n);
  if (!DnnlBf16Gemm(ma, mb, reinterpret_cast<float*>(c), ldc, accumulate)) {
    Bf16ViaFloat32(ma, mb, c, ldc, accumulate, nullptr);
  }
}

// c (+)= a · b split along K into kt slices (NOTE: K split): slice t's product goes into c (t = 0) or
// partial t - 1, then row range t of c (rows [m·t/kt, m·(t+1)/kt)) gets the partials added and its
// epilogue, so the epilogue calls depend only on the shape and kt.
void KSplitGemm(DType dtype, const BlasOperand& ba, const BlasOperand& bb, char* pc, int64_t ldc, int64_t m,
                int64_t n, int64_t k, bool accumulate, const GemmEpilogue& epilogue, int kt) {
  const int64_t esz = ElementSize(dtype), esz_c = ProductElementSize(dtype);
  const int64_t mn = m * n;
  std::unique_ptr<char[]> scratch(new char[static_cast<size_t>((kt - 1) * mn * esz_c)]);  // written whole
  const NumThreadsGuard budget(kt);
  ParallelFor(0, kt, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t kb = k * t / kt, ke = k * (t + 1) / kt;
      BlasOperand sa = ba, sb = bb;
      sa.data = At(ba, 0, kb, esz);
      sb.data = At(bb, kb, 0, esz);
      if (t == 0) {
        PanelCall(dtype, sa, sb, pc, ldc, m, n, ke - kb, accumulate);
      } else {
        PanelCall(dtype, sa, sb, scratch.get() + (t - 1) * mn * esz_c, n, m, n, ke - kb, /*accumulate=*/false);
      }
    }
  });
  ParallelFor(0, kt, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = m * t / kt, r1 = m * (t + 1) / kt;
      if (r0 == r1) continue;
      if (esz_c == 8) {
        AddPartialRows(reinterpret_cast<const double*>(scratch.get()), kt - 1, mn, n, reinterpret_cast<double*>(pc),
                       ldc, r0, r1);
      } else {
        AddPartialRows(reinterpret_cast<const float*>(scratch.get()), kt - 1, mn, n, reinterpret_cast<float*>(pc), ldc,
                       r0, r1);
      }
      if (epilogue) epilogue(r0, r1, 0, n);
    }
  });
}

}  // namespace

bool Bf16GemmIsNative() { return DnnlHasFastBf16() && !force_bf16_fallback.load(); }

std::string Bf16GemmBackend() {
  if (force_bf16_fallback.load()) return "fp32 fallback (forced for testing)";
  if (!DnnlHasFastBf16()) {
    return "fp32 fallback (oneDNN ISA " + DnnlIsa() + " has neither AMX-BF16 nor AMD's AVX512-BF16)";
  }
  const std::string impl = DnnlBf16Impl();
  return "oneDNN (ISA " + DnnlIsa() + (impl.empty() ? "" : ", kernels " + impl) + ")";
}

void SetBf16GemmFallbackForTesting(bool force) { force_bf16_fallback.store(force); }

bool GemmCanRead(const MatRef& m) { return IsRowMajor(m) || IsColMajor(m); }

std::string GemmBackend() {
  SingleThreadedBlas();
  const char* core = openblas_get_corename();
  const std::string openblas = std::string("OpenBLAS (") + (core ? core : "unknown") + " kernels, " +
                               std::to_string(openblas_get_num_threads()) + " BLAS thread per call)";
  const std::string float32 = force_float32_openblas.load()
                                  ? "OpenBLAS (forced for testing)"
                                  : "oneDNN sgemm (ISA " + DnnlIsa() + ", 1 thread per call)";
  return "float32: " + float32 + "; float64: " + openblas;
}

void SetFloat32GemmOnOpenBlasForTesting(bool force) { force_float32_openblas.store(force); }

void Gemm(DType dtype, const MatRef& a, const MatRef& b, void* c, int64_t ldc, bool accumulate,
          const GemmEpilogue& epilogue) {
  TESSEL_INTERNAL_ASSERT(a.cols == b.rows, "gemm: inner dims ", a.cols, " vs ", b.rows);
  TESSEL_INTERNAL_ASSERT(GemmCanRead(a) && GemmCanRead(b), "gemm: operand needs a copy first");
  TESSEL_INTERNAL_ASSERT(dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16,
                         "gemm: dtype ", DTypeName(dtype), " (convert float16 to float32 first)");
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  const int64_t esz = ElementSize(dtype);                             // operands
  const int64_t esz_c = ProductElementSize(dtype);                   // product (bf16 → float32)
  ldc = m == 1 ? std::max(ldc, n) : ldc;  // BLAS asks ldc >= n even when the row stride is never used
  if (k == 0) {
    if (!accumulate) ZeroRows(c, ldc, m, n, esz_c);
    if (epilogue) epilogue(0, m, 0, n);
    return;
  }
  if (dtype == DType::kBFloat16 && !Bf16GemmIsNative()) return Bf16ViaFloat32(a, b, c, ldc, accumulate, epilogue);
  SingleThreadedBlas();
  const BlasOperand ba = ToBlas(a), bb = ToBlas(b);
  TESSEL_CHECK(std::max({m, n, k, ba.ld, bb.ld, ldc}) <= INT_MAX, "gemm: [", m, ", ", k, "] @ [", k, ", ", n,
               "] has a dim or leading dim above the BLAS's 32-bit index range");
  char* pc = static_cast<char*>(c);
  if (const int kt = KSplitThreads(m, n, k, esz_c); kt > 1) {
    return KSplitGemm(dtype, ba, bb, pc, ldc, m, n, k, accumulate, epilogue, kt);
  }
  const bool split_rows = m >= n || dtype == DType::kBFloat16;
  const int threads = SplitThreads(m, n, k, split_rows ? m : n);
  if (threads == 1) {
    PanelCall(dtype, ba, bb, pc, ldc, m, n, k, accumulate);
    if (epilogue) epilogue(0, m, 0, n);
    return;
  }
  // Split the larger output dim into aligned panels; each panel reads all of the other operand. Two
  // panels per thread when that operand is small enough to pack twice (ParallelFor hands panels out
  // dynamically, so a thread descheduled by other load holds up at most one panel).
  const int64_t extent = split_rows ? m : n;
  const int64_t shared = k * (split_rows ? n : m);
  const bool two_per_thread = shared <= kSmallSharedOperand && extent >= 2 * threads * kPanelAlign &&
                              m * n * k / threads >= kTwoPanelMinMacsPerThread;
  const int64_t panels = threads * (two_per_thread ? 2 : 1);
  const int64_t panel = (extent / panels + kPanelAlign - 1) / kPanelAlign * kPanelAlign;
  const NumThreadsGuard budget(threads);  // at most `threads` of the caller's budget work on this GEMM
  ParallelFor(0, panels, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t begin = std::min(extent, t * panel);
      const int64_t end = t == panels - 1 ? extent : std::min(extent, begin + panel);
      if (begin >= end) continue;
      if (split_rows) {
        BlasOperand sa = ba;
        sa.data = At(ba, begin, 0, esz);
        PanelCall(dtype, sa, bb, pc + begin * ldc * esz_c, ldc, end - begin, n, k, accumulate);
        if (epilogue) epilogue(begin, end, 0, n);  // the panel is still in this core's cache
      } else {
        BlasOperand sb = bb;
        sb.data = At(bb, 0, begin, esz);
        PanelCall(dtype, ba, sb, pc + begin * esz_c, ldc, m, end - begin, k, accumulate);
        if (epilogue) epilogue(0, m, begin, end);
      }
    }
  });
}

}  // namespace tessel
