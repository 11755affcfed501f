// core/ops/ternary.h — selection by a boolean mask (where, masked_fill) or by comparison (maximum, minimum), and
// the three-operand arithmetic of optimizer updates (addcmul, addcdiv, lerp).
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
Tensor Ne(const Tensor& a, const Tensor& b);  // true for NaN, as torch
Tensor Le(const Tensor& a, const Tensor& b);  // false for NaN
Tensor Ge(const Tensor& a, const Tensor& b);
// torch.maximum / torch.minimum (same dtype, broadcasting): a on a tie, NaN where either is NaN; a tie's
// gradient goes half to each side, a NaN's whole to both (torch's formula).
Tensor Maximum(const Tensor& a, const Tensor& b);
Tensor Minimum(const Tensor& a, const Tensor& b);
// torch.addcmul / addcdiv / lerp on tensors of one floating dtype (broadcasting), with torch's CPU values bit
// for bit: self + value·t1·t2 and self + value·t1 / t2, and self + w·(end - self) (|w| < 0.5) or
// end + (w - 1)·(end - self), the multiply-adds fused as torch's kernels fuse them (ternary.cc).
Tensor Addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value);
Tensor Addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value);
Tensor Lerp(const Tensor& self, const Tensor& end, double weight);
Tensor Lerp(const Tensor& self, const Tensor& end, const Tensor& weight);
// The same written into self (which must have the broadcast shape); not recorded by autograd, bumps self's version.
void AddcmulInPlace(const Tensor& self, const Tensor& t1, const Tensor& t2, double value);
void AddcdivInPlace(const Tensor& self, const Tensor& t1, const Tensor& t2, double value);
void LerpInPlace(const Tensor& self, const Tensor& end, double weight);
void LerpInPlace(const Tensor& self, const Tensor& end, const Tensor& weight);

}  // namespace tessel
