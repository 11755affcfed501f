// core/ops/linear_gelu.h — the fused op "linear_gelu": gelu(x · wᵀ + b) in one pass over the product.
//
// Ops (core/ops/linear_gelu.cc, [Note: linear_gelu's two nodes]):
//   linear_gelu(x [..., in], weight [out, in], bias [out]?) {approximate: "tanh" | "none"}
//       → out [..., out] = gelu(pre) (non-differentiable here), pre [..., out] = x · weightᵀ + bias;
//         backward: linear's formulas from grad_pre.
//   gelu_precomputed(out, pre) {approximate} → out as it is; backward: grad_pre = gelu_backward(grad, pre).
// LinearGelu chains the two, so gradients flow as through Gelu(Linear(x, w, b)).
//
// Invariant: out and pre equal Gelu(Linear(x, w, b), approximate) and Linear(x, w, b) bit for bit on
// every dtype (float32 computes the same GEMM and the same per-ISA GELU kernel, only in the GEMM's
// epilogue; other dtypes run linear's kernel and then gelu's). Argument errors name "linear_gelu" and
// the shapes, in linear's words.
//
// Example (the GPT MLP's first projection):
//   Tensor h_BTF = LinearGelu(x_BTC, fc_w_FC, fc_b_F, "tanh");
#pragma once

#include <string>

#include "core/tensor/tensor.h"

namespace tessel {

// gelu(x · weightᵀ + bias); bias may be undefined; approximate "tanh" or "none" (as Gelu).
Tensor LinearGelu(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::string& approximate);

// While alive on this thread, LinearGelu runs as Linear then Gelu (two ops, the same values bit for bit).
// For activation checkpointing that keeps GEMM outputs and recomputes pointwise ops (core/nn's "gemm"
// policy): the fused op's outputs are both [..., out], so keeping them would hold gelu(pre) as well, while
// linear's output alone lets the recompute rebuild gelu(pre) without a GEMM. Scopes nest.
class UnfusedLinearGeluScope {
 public:
  UnfusedLinearGeluScope();
  ~UnfusedLinearGeluScope();
  UnfusedLinearGeluScope(const UnfusedLinearGeluScope&) = delete;
  UnfusedLinearGeluScope& operator=(const UnfusedLinearGeluScope&) = delete;
};

}  // namespace tessel
