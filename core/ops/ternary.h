// core/ops/ternary.h — selection by a boolean mask (where, masked_fill) or by comparison (maximum, minimum).
//
// Invariant: cond/mask are bool tensors broadcast against the values; gradients flow only to the
// selected side (zero elsewhere) and never to the mask.
//
// Example:
//   Tensor y = Where(mask_BT, x_BT, zeros_BT);
//   Tensor s = MaskedFill(scores_TT, causal_mask_TT, -INFINITY);
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value);
// Elementwise comparisons giving bool tensors (broadcasting; not differentiable).
Tensor Eq(const Tensor& a, const Tensor& b);
Tensor Lt(const Tensor& a, const Tensor& b);
Tensor Gt(const Tensor& a, const Tensor& b);
// torch.maximum / torch.minimum (same dtype, broadcasting): a on a tie, NaN where either is NaN; a tie's
// gradient goes half to each side, a NaN's whole to both (torch's formula).
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);

}  // namespace tessel
