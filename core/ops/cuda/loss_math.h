// core/ops/cuda/loss_math.h — per-row formulas of the cross_entropy CUDA kernels (core/ops/loss.cu),
// shared with a host test that runs them in the kernels' order against the CPU ops "cross_entropy" and
// "cross_entropy_backward" (core/ops/loss.cc).
//
// Invariant: the CPU kernel's formulas in fp32, a row of C logits at a time, its log-sum-exp taken from
// one online pass (MaxSumAcc over the row as a lane of Lanes{rows, C, 1}):
//   loss_r = (max + log Σ exp(x - max)) - x[target_r]               (0 for ignored rows)
//   dx_rj  = exp(x_j - lse) * scale_r - (j == target_r ? scale_r : 0)  (0 for ignored rows)
//   scale_r = grad[r] ("none") or grad[0] / divisor ("sum": 1, "mean": max(valid, 1))
// The "mean" / "sum" loss is the tree-merged sum of the per-row fp32 losses over one block, divided by
// the number of valid rows ("mean"; 0 valid rows give 0 / 0 = NaN as torch) — the CPU sums in double, so
// the two agree to fp32 rounding.
//
// Example (thread t of T on row r):
//   const MaxSumAcc m = ...tree-merged SoftmaxPartial(logits, Lanes{rows, C, 1}, r * C, t, T)...;
//   loss[r] = CrossEntropyRowLoss(RowLogSumExp(m), LoadF(logits, r * C + target[r]));
#pragma once

#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

TESSEL_HOST_DEVICE inline float RowLogSumExp(const MaxSumAcc& m) { return m.max + logf(m.sum); }

TESSEL_HOST_DEVICE inline float CrossEntropyRowLoss(float lse, float logit_at_target) { return lse - logit_at_target; }

template <typename T>
TESSEL_HOST_DEVICE inline float CrossEntropyScale(const T* grad, int64_t row, bool per_row, float divisor) {
  return per_row ? LoadF(grad, row) : LoadF(grad, 0) / divisor;
}

TESSEL_HOST_DEVICE inline float CrossEntropyGrad(float x, float lse, float scale, bool is_target) {
  const float v = expf(x - lse) * scale;
  return is_target ? v - scale : v;
}

}  // namespace tessel::cuda
