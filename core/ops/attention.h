// core/ops/attention.h — scaled dot-product attention (causal or full), fused forward and backward.
//
// Example:
//   Tensor y_BHTD = ScaledDotProductAttention(q_BHTD, k_BHSD, v_BHSD, /*is_causal=*/true);
#pragma once

#include <optional>

#include "core/tensor/tensor.h"

namespace tessel {

// q [..., T, D], k [..., S, D], v [..., S, Dv]; scale defaults to 1/sqrt(D). Causal masks key j for
// query i when j > i (torch's is_causal: ones(T, S).tril(0), top-left aligned even when T != S).
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = true,
                                 std::optional<double> scale = std::nullopt);

}  // namespace tessel
