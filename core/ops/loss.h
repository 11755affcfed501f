// core/ops/loss.h — cross_entropy on logits (fused log_softmax + nll).
//
// Example:
//   Tensor loss = CrossEntropy(logits_NV, targets_N);          // mean over non-ignored targets
//   Tensor per = CrossEntropy(logits_NV, targets_N, -100, "none");
#pragma once

#include <string>

#include "core/tensor/tensor.h"

namespace tessel {

// logits [N, C] (or [C]); target int64 [N]; reduction "mean" | "sum" | "none".
Tensor CrossEntropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                    const std::string& reduction = "mean");

}  // namespace tessel
