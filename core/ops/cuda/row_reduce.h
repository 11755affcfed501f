// core/ops/cuda/row_reduce.h — the one-block-per-lane reduction scheme of tessel's softmax and norm CUDA
// kernels (core/ops/softmax.cu, core/ops/norm.cu): lane addressing, element loads/stores, the
// accumulators and the shared-memory tree order, as plain C++ that the host tests run in the kernels'
// exact order (EmulateBlockReduce) against the CPU kernels.
//
// Invariant: a lane is the n values along `dim` of a contiguous tensor seen as row-major [A, N, K]
// (base Lanes::Base(lane), stride K). Thread t of a block of BlockThreads(n) threads (a power of two,
// 32..kMaxRowThreads) folds elements t, t + T, t + 2T, ... into its accumulator; TreeStep for s = T/2,
// T/4, ..., 1 then merges them so that slot 0 holds the lane's result. All arithmetic is fp32; bf16
// values widen on load and round once on store (tessel's CPU rounding, cuda/bf16.h).
//
// Example (host emulation of a block; the kernel does the same with __shared__ slots):
//   const int threads = BlockThreads(l.n);
//   SumAcc r = EmulateBlockReduce<SumAcc>(threads, [&](int t) { return LaneSum(x, l, base, t, threads); });
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/ops/cuda/bf16.h"
#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

inline constexpr int kMaxRowThreads = 256;

// Threads per block for a lane of n elements: the next power of two >= n, clamped to [32, 256].
TESSEL_HOST_DEVICE inline int BlockThreads(int64_t n) {
  int t = 32;
  while (t < kMaxRowThreads && t < n) t *= 2;
  return t;
}

struct Lanes {
  int64_t a, n, k;  // the [A, N, K] view around the reduced dim

  TESSEL_HOST_DEVICE int64_t count() const { return a * k; }
  TESSEL_HOST_DEVICE int64_t Base(int64_t lane) const { return (lane / k) * n * k + lane % k; }

  // REQUIRES: 0 <= dim < sizes.size().
  static Lanes Of(std::span<const int64_t> sizes, int64_t dim) {
    Lanes l{1, 1, 1};
    for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
      (d < dim ? l.a : d == dim ? l.n : l.k) *= sizes[d];
    }
    return l;
  }
};

TESSEL_HOST_DEVICE inline float LoadF(const float* p, int64_t i) { return p[i]; }
TESSEL_HOST_DEVICE inline float LoadF(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }
TESSEL_HOST_DEVICE inline void StoreF(float* p, int64_t i, float v) { p[i] = v; }
TESSEL_HOST_DEVICE inline void StoreF(uint16_t* p, int64_t i, float v) { p[i] = FloatToBf16(v); }

// Accumulators are trivial types (no member initializers) so they can live in __shared__ arrays; start
// each one from Identity().
struct SumAcc {
  float sum;
  TESSEL_HOST_DEVICE static SumAcc Identity() { return {0.0f}; }
  TESSEL_HOST_DEVICE void Push(float v) { sum += v; }
  TESSEL_HOST_DEVICE void Merge(const SumAcc& o) { sum += o.sum; }
};

// Maximum that propagates NaN (the CPU reductions' Combine: a NaN anywhere makes the result NaN).
// Exact, so any order gives the CPU's value (up to the sign of a zero maximum among +0 / -0 ties).
struct MaxAcc {
  float max;
  TESSEL_HOST_DEVICE static MaxAcc Identity() { return {-INFINITY}; }
  TESSEL_HOST_DEVICE void Push(float v) { max = (max != max || v <= max) ? max : v; }
  TESSEL_HOST_DEVICE void Merge(const MaxAcc& o) { Push(o.max); }
};

struct SumPairAcc {
  float first, second;
  TESSEL_HOST_DEVICE static SumPairAcc Identity() { return {0.0f, 0.0f}; }
  TESSEL_HOST_DEVICE void Merge(const SumPairAcc& o) {
    first += o.first;
    second += o.second;
  }
};

// Online softmax statistics: sum = Σ exp(x_i - max). A lane of only -inf keeps max = -inf and sum = 0
// (its outputs then compute exp(-inf - -inf) = NaN, as the CPU kernel does); a NaN anywhere makes sum NaN.
struct MaxSumAcc {
  float max, sum;
  TESSEL_HOST_DEVICE static MaxSumAcc Identity() { return {-INFINITY, 0.0f}; }
  TESSEL_HOST_DEVICE void Push(float x) {
    if (x != x) {
      sum = NAN;
    } else if (x > max) {
      sum = sum * expf(max - x) + 1.0f;  // max = -inf: sum * 0
      max = x;
    } else if (x != -INFINITY) {
      sum += expf(x - max);
    }
  }
  TESSEL_HOST_DEVICE void Merge(const MaxSumAcc& o) {
    const float m = max > o.max ? max : o.max;
    if (m == -INFINITY) {
      sum += o.sum;  // both lanes empty so far (0, or NaN seen)
    } else {
      sum = sum * expf(max - m) + o.sum * expf(o.max - m);
    }
    max = m;
  }
};

// Σ f(value) over one thread's elements t, t + T, ... of a row.
template <typename T, typename F>
TESSEL_HOST_DEVICE inline SumAcc RowSumPartial(const T* row, int64_t cols, int t, int threads, F f) {
  SumAcc acc = SumAcc::Identity();
  for (int64_t i = t; i < cols; i += threads) acc.sum += f(LoadF(row, i));
  return acc;
}

// One step of the block's tree reduction (run for s = T/2, ..., 1 with a barrier after each).
template <typename Acc>
TESSEL_HOST_DEVICE inline void TreeStep(Acc* acc, int t, int s) {
  if (t < s) acc[t].Merge(acc[t + s]);
}

// Host only: the block's result exactly as the kernels compute it (partial(t) for each thread, then the
// tree). Used by the host tests; the kernels inline the same two phases around __syncthreads().
template <typename Acc, typename PartialFn>
Acc EmulateBlockReduce(int threads, PartialFn partial) {
  std::vector<Acc> acc(threads);
  for (int t = 0; t < threads; ++t) acc[t] = partial(t);
  for (int s = threads / 2; s > 0; s /= 2) {
    for (int t = 0; t < threads; ++t) TreeStep(acc.data(), t, s);
  }
  return acc[0];
}

}  // namespace tessel::cuda
