// core/ops/attention.h — scaled dot-product attention (causal or full), fused forward and backward.
//
// Example:
//   Tensor y_BHTD = ScaledDotProductAttention(q_BHTD, k_BHSD, v_BHSD, /*is_causal=*/true);
#pragma once

#include <optional>

#include "core/tensor/tensor.h"

namespace tessel {

// q [..., T, D], k/v [..., S, D]; scale defaults to 1/sqrt(D). Causal masks j > i (+ S - T offset).
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = true,
                                 std::optional<double> scale = std::nullopt);

}  // namespace tessel
