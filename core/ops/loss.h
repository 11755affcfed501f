// core/ops/loss.h — cross_entropy on logits (fused log_softmax + nll).
//
// Example:
//   Tensor loss = CrossEntropy(logits_NV, targets_N);          // mean over non-ignored targets
//   Tensor per = CrossEntropy(logits_NV, targets_N, -100, "none");
#pragma once

#include <string>

#include "core/tensor/tensor.h"

namespace tessel {

// logits [N, C] (or [C]); target int64 [N]; reduction "mean" | "sum" | "none". 16-bit logits follow torch's CPU
// log_softmax + nll_loss roundings; `rows_of_class_dim_1` (the rows of (N, C, d1, ...) logits, classes moved last):
// torch's log_softmax along dim 1 then keeps its log-sum-exp in float32.
Tensor CrossEntropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                    const std::string& reduction = "mean", bool rows_of_class_dim_1 = false);

// With torch's label_smoothing ε in [0, 1]: the target is (1 - ε)·one_hot + ε / C, so each row's loss
// is (1 - ε)·nll + ε·mean_c(-log_softmax(logits)); ignored rows are 0 and "mean" divides by the
// non-ignored rows (NaN when there are none, as torch). ε = 0 is the fused op above; otherwise a
// composition of ops (log_softmax, mean, where), differentiable through them. ε outside [0, 1] is
// kInvalidArgument.
Tensor CrossEntropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, const std::string& reduction,
                    double label_smoothing, bool rows_of_class_dim_1 = false);

}  // namespace tessel
