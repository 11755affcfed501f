// core/ops/gemm.cc — Gemm on Eigen: maps each operand row- or column-major in place (no copy).
//
// NOTE: threads. Eigen's OpenMP GEMM asks omp_get_max_threads() (the calling thread's ICV) unless
// Eigen::setNbThreads was called; setNbThreads writes one process-wide static, which rank threads of
// the threads backend would race on. So we never call it and instead keep this thread's ICV equal to
// its tessel budget, NumThreads(): same effect, per thread.
#include "core/ops/gemm.h"

#include <omp.h>

#include <Eigen/Core>

#include "core/base/error.h"
#include "core/base/parallel.h"

namespace tessel {
namespace {

bool IsRowMajor(const MatRef& m) {
  return (m.col_stride == 1 || m.cols == 1) && (m.rows == 1 || m.row_stride >= m.cols);
}
bool IsColMajor(const MatRef& m) {
  return (m.row_stride == 1 || m.rows == 1) && (m.cols == 1 || m.col_stride >= m.rows);
}

template <typename T>
using RowMajorMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
template <typename T>
using ColMajorMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>, 0, Eigen::OuterStride<>>;

// Leading dimension for the chosen order; a size-1 outer dim has no meaningful stride.
int64_t RowMajorLd(const MatRef& m) { return m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.row_stride; }
int64_t ColMajorLd(const MatRef& m) { return m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.col_stride; }

template <typename T, typename A>
void GemmWithA(
    const A& a, const MatRef& b,
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>& c) {
  const T* pb = static_cast<const T*>(b.data);
  if (IsRowMajor(b)) {
    RowMajorMap<T> mb(pb, b.rows, b.cols, Eigen::OuterStride<>(RowMajorLd(b)));
    c.noalias() += a * mb;
  } else {
    ColMajorMap<T> mb(pb, b.rows, b.cols, Eigen::OuterStride<>(ColMajorLd(b)));
    c.noalias() += a * mb;
  }
}

template <typename T>
void GemmTyped(const MatRef& a, const MatRef& b, T* pc, int64_t ldc, bool accumulate) {
  using OutMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<OutMat, 0, Eigen::OuterStride<>> c(pc, a.rows, b.cols, Eigen::OuterStride<>(std::max<int64_t>(ldc, 1)));
  if (!accumulate) c.setZero();
  if (a.cols == 0) return;
  const T* pa = static_cast<const T*>(a.data);
  if (IsRowMajor(a)) {
    GemmWithA<T>(RowMajorMap<T>(pa, a.rows, a.cols, Eigen::OuterStride<>(RowMajorLd(a))), b, c);
  } else {
    GemmWithA<T>(ColMajorMap<T>(pa, a.rows, a.cols, Eigen::OuterStride<>(ColMajorLd(a))), b, c);
  }
}

}  // namespace

bool GemmCanRead(const MatRef& m) { return IsRowMajor(m) || IsColMajor(m); }

void Gemm(DType dtype, const MatRef& a, const MatRef& b, void* c, int64_t ldc, bool accumulate) {
  TESSEL_INTERNAL_ASSERT(a.cols == b.rows, "gemm: inner dims ", a.cols, " vs ", b.rows);
  TESSEL_INTERNAL_ASSERT(GemmCanRead(a) && GemmCanRead(b), "gemm: operand needs a copy first");
  if (a.rows == 0 || b.cols == 0) return;
  if (!omp_in_parallel()) {
    const int threads = NumThreads();
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  }
  switch (dtype) {
    case DType::kFloat32:
      GemmTyped<float>(a, b, static_cast<float*>(c), ldc, accumulate);
      break;
    case DType::kFloat64:
      GemmTyped<double>(a, b, static_cast<double*>(c), ldc, accumulate);
      break;
    default:
      TESSEL_INTERNAL_ASSERT(false, "gemm: dtype ", DTypeName(dtype), " (convert 16-bit floats to float32 first)");
  }
}

}  // namespace tessel
