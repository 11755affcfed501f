// core/ops/cuda/softmax_math.h — per-thread partials and per-element outputs of the softmax family's
// CUDA kernels (core/ops/softmax.cu), shared with a host test that runs them in the kernels' order
// against the CPU ops "softmax", "log_softmax", "softmax_backward" and "log_softmax_backward".
//
// Invariant: the CPU kernel's formulas (core/ops/softmax.cc) in fp32:
//   softmax y = exp(x - max) * (1 / Σ exp(x - max));   log_softmax y = (x - max) - log Σ exp(x - max)
//   softmax dx = y * (g - Σ g·y);                      log_softmax dx = g - exp(y) * Σ g
// The max and Σ exp come from one online pass (MaxSumAcc) instead of two, so results agree with the CPU
// to rounding, not bitwise.
//
// Example (thread t of T on lane `base`):
//   MaxSumAcc p = SoftmaxPartial(x, l, base, t, T);   // ... tree-merged into r ...
//   y[base + i * l.k] = SoftmaxOut<false>(x_i, r);
#pragma once

#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

template <typename T>
TESSEL_HOST_DEVICE inline MaxSumAcc SoftmaxPartial(const T* x, const Lanes& l, int64_t base, int t, int threads) {
  MaxSumAcc acc = MaxSumAcc::Identity();
  for (int64_t i = t; i < l.n; i += threads) acc.Push(LoadF(x, base + i * l.k));
  return acc;
}

template <bool kLog>
TESSEL_HOST_DEVICE inline float SoftmaxOut(float x, const MaxSumAcc& r) {
  if constexpr (kLog) {
    return (x - r.max) - logf(r.sum);
  } else {
    return expf(x - r.max) * (1.0f / r.sum);
  }
}

// Σ g·y (softmax) or Σ g (log_softmax) of one thread's elements.
template <bool kLog, typename T>
TESSEL_HOST_DEVICE inline SumAcc SoftmaxBackwardPartial(const T* g, const T* y, const Lanes& l, int64_t base, int t,
                                                        int threads) {
  SumAcc acc = SumAcc::Identity();
  for (int64_t i = t; i < l.n; i += threads) {
    const int64_t j = base + i * l.k;
    acc.sum += kLog ? LoadF(g, j) : LoadF(g, j) * LoadF(y, j);
  }
  return acc;
}

template <bool kLog>
TESSEL_HOST_DEVICE inline float SoftmaxBackwardOut(float g, float y, float lane_sum) {
  if constexpr (kLog) {
    return g - expf(y) * lane_sum;
  } else {
    return y * (g - lane_sum);
  }
}

}  // namespace tessel::cuda
