// core/ops/loss_rows.h — internal to the loss kernels (core/ops/loss.cc and the vocab-sharded loss in
// dtensor/rules/loss.cc): one row of logits as an Eigen array in the compute type, so both compute
// log-sum-exp and softmax rows with the same vectorized Eigen expressions, and one row of the gradient
// (SoftmaxGradRow).
//
// Invariant: header-only; a float32/float64 row is mapped in place, a 16-bit row widened into `buf`.
//
// Example:
//   RowArray<float> buf;
//   const auto row = LoadRow(logits_bf16 + r * classes, classes, buf);   // widened to float32
//   const float m = row.maxCoeff();
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "core/ops/exact_math.h"
#include "core/tensor/dtype.h"

namespace tessel {

template <typename C>
using RowArray = Eigen::Array<C, Eigen::Dynamic, 1>;

// A row of compute-type values: the row itself when T is its own compute type, else a converted copy.
template <typename T>
Eigen::Map<const RowArray<ComputeT<T>>> LoadRow(const T* src, int64_t n, RowArray<ComputeT<T>>& buf) {
  using C = ComputeT<T>;
  if constexpr (std::is_same_v<T, C>) {
    return Eigen::Map<const RowArray<C>>(src, n);
  } else {
    buf.resize(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = ToCompute(src[i]);
    return Eigen::Map<const RowArray<C>>(buf.data(), n);
  }
}

// out[0, n) = (softmax(row) - onehot(target)) · scale with softmax = exp(row - m) · inv_sum (m the row's max,
// inv_sum 1 / Σ exp(row - m): exp(row - lse) rounded a large max into lse first, so the gradients of logits
// near 1e4 lost three digits): cross-entropy's gradient row, exactly 0 at -inf (masked) logits as in torch
// (exact_math.h). `target` outside [0, n) (another shard's class) subtracts nothing. A 16-bit row is computed
// in `buf` and rounded once.
template <typename T>
void SoftmaxGradRow(const Eigen::Map<const RowArray<ComputeT<T>>>& row, ComputeT<T> m, ComputeT<T> inv_sum,
                    ComputeT<T> scale, int64_t target, T* out, RowArray<ComputeT<T>>& buf) {
  using C = ComputeT<T>;
  const int64_t n = row.size();
  C* grad;
  if constexpr (std::is_same_v<T, C>) {
    grad = out;
  } else {
    buf.resize(n);
    grad = buf.data();
  }
  ExpInto(row.data(), m, grad, n);
  Eigen::Map<RowArray<C>> g(grad, n);
  g *= scale * inv_sum;
  if (target >= 0 && target < n) g[target] -= scale;
  if constexpr (!std::is_same_v<T, C>) {
    for (int64_t j = 0; j < n; ++j) out[j] = FromCompute<T>(grad[j]);
  }
}

}  // namespace tessel
