// core/ops/cuda/norm_math.h — per-thread partials, per-element outputs and the grad_weight/grad_bias
// blocking of the layer_norm / rms_norm CUDA kernels (core/ops/norm.cu), shared with a host test that
// runs them in the kernels' order against the CPU ops (core/ops/norm.cc).
//
// Invariant: the CPU kernel's formulas in fp32, over rows of `cols` values (the last dim):
//   forward   mean = Σx / n (layer_norm only), rstd = 1 / sqrt(Σ(x - mean)² / n + eps),
//             y = (x - mean) * rstd * w + b   (w, b optional; mean = 0 for rms_norm)
//   backward  g = dy * w, mg = Σg / n (layer_norm; else 0), mgx = rstd * Σ g(x - mean) / n,
//             dx = rstd * (g - mg - (x - mean) * rstd * mgx)
//   params    dw = Σ_rows dy (x - mean) rstd, db = Σ_rows dy, summed in NormParamBlocks: rows cut into
//             num_blocks = min(rows, 64) runs of per_block rows, each run summed in row order into a
//             partial, the partials then summed in block order — the CPU kernel's own blocking.
//
// Example (thread t of T on row r):
//   SumAcc p = RowSumPartial(x + r * cols, cols, t, T, [](float v) { return v; });   // Σx, tree-merged
//   const float mean = NormMean(merged.sum, cols);
#pragma once

#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

inline constexpr int64_t kNormParamBlocks = 64;  // = the CPU kernel's kReduceBlocks

struct NormParamBlocks {
  int64_t rows, num_blocks, per_block;

  static NormParamBlocks Make(int64_t rows) {
    const int64_t nb = rows < kNormParamBlocks ? rows : kNormParamBlocks;
    return {rows, nb, nb == 0 ? 0 : (rows + nb - 1) / nb};
  }
  TESSEL_HOST_DEVICE int64_t Begin(int64_t blk) const { return blk * per_block; }
  TESSEL_HOST_DEVICE int64_t End(int64_t blk) const {
    const int64_t e = (blk + 1) * per_block;
    return e < rows ? e : rows;
  }
};

TESSEL_HOST_DEVICE inline float NormMean(float sum, int64_t cols) { return sum * (1.0f / static_cast<float>(cols)); }

TESSEL_HOST_DEVICE inline float NormRstd(float sum_sq, int64_t cols, float eps) {
  return 1.0f / sqrtf(sum_sq * (1.0f / static_cast<float>(cols)) + eps);
}

// w / b: parameters of x's element type, or null (optional).
template <typename T>
TESSEL_HOST_DEVICE inline float NormOut(float x, float mean, float rstd, const T* w, const T* b, int64_t i) {
  float v = (x - mean) * rstd;
  if (w != nullptr) v *= LoadF(w, i);
  if (b != nullptr) v += LoadF(b, i);
  return v;
}

// (Σg, Σ g·(x - mean)) of one thread's elements, g = dy * w.
template <typename T>
TESSEL_HOST_DEVICE inline SumPairAcc NormBackwardPartial(const T* dy_row, const T* x_row, const T* w, float mean,
                                                         int64_t cols, int t, int threads) {
  SumPairAcc acc = SumPairAcc::Identity();
  for (int64_t i = t; i < cols; i += threads) {
    const float g = w == nullptr ? LoadF(dy_row, i) : LoadF(dy_row, i) * LoadF(w, i);
    acc.first += g;
    acc.second += g * (LoadF(x_row, i) - mean);
  }
  return acc;
}

// dx of one element from the row's merged partial r (centered: layer_norm).
template <bool kCentered, typename T>
TESSEL_HOST_DEVICE inline float NormBackwardOut(float dy, float x, const T* w, int64_t i, float mean, float rstd,
                                                const SumPairAcc& r, int64_t cols) {
  const float inv_n = 1.0f / static_cast<float>(cols);
  const float g = w == nullptr ? dy : dy * LoadF(w, i);
  const float mg = kCentered ? r.first * inv_n : 0.0f;
  const float mgx = r.second * rstd * inv_n;
  return rstd * (g - mg - (x - mean) * rstd * mgx);
}

// The partial of column i over block blk: (Σ dy (x - mean) rstd, Σ dy). mean may be null (rms_norm).
template <typename T>
TESSEL_HOST_DEVICE inline SumPairAcc NormParamPartial(const T* dy, const T* x, const float* mean, const float* rstd,
                                                      int64_t cols, const NormParamBlocks& b, int64_t blk, int64_t i) {
  SumPairAcc acc = SumPairAcc::Identity();
  for (int64_t r = b.Begin(blk); r < b.End(blk); ++r) {
    const float d = LoadF(dy, r * cols + i);
    const float mu = mean == nullptr ? 0.0f : mean[r];
    acc.first += d * (LoadF(x, r * cols + i) - mu) * rstd[r];
    acc.second += d;
  }
  return acc;
}

}  // namespace tessel::cuda
