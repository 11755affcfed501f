// core/ops/attention.h — scaled dot-product attention (causal or full), fused forward and backward; with
// an attention mask or dropout, torch's "math" composition of ops.
//
// Example:
//   Tensor y_BHTD = ScaledDotProductAttention(q_BHTD, k_BHSD, v_BHSD, /*is_causal=*/true);
//   Tensor z = ScaledDotProductAttention(q, k, v, {.attn_mask = keep_TS, .dropout_p = 0.1, .generator = &gen});
#pragma once

#include <optional>

#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace tessel {

// q [..., T, D], k [..., S, D], v [..., S, Dv]; scale defaults to 1/sqrt(D). Causal masks key j for
// query i when j > i (torch's is_causal: ones(T, S).tril(0), top-left aligned even when T != S).
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = true,
                                 std::optional<double> scale = std::nullopt);

// torch.nn.functional.scaled_dot_product_attention's full signature (no enable_gqa). attn_mask: bool
// (true: the query attends to the key) or q's floating dtype (added to the scores), broadcastable to
// [..., T, S]; not together with is_causal (kInvalidArgument, as torch). dropout_p > 0 drops attention
// weights after the softmax (core/ops/dropout.h, drawing from *generator, which is then required).
// Without a mask and dropout this is the fused kernel above; otherwise softmax(q·kᵀ·scale + mask)·v
// from matmul, softmax and where ops ([..., T, S] scores are materialized, as torch's math backend).
// A query row whose keys are all masked gives 0, as torch >= 2.5 (its _safe_softmax).
struct AttentionOptions {
  Tensor attn_mask;
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale;
  Generator* generator = nullptr;
};
Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options);

// The fused kernels themselves, without autograd, for callers that merge partial attentions over blocks of keys
// (context parallelism: bindings/tessel/distributed/tensor/experimental/_context_parallel.py). Forward: out
// (q's dtype) and lse [..., T] (log-sum-exp of the scaled scores per query row, float32; -inf for a row that sees
// no key). Backward: dq, dk, dv of this block of keys given the *final* out and lse of the rows (FlashAttention's
// P = exp(s - lse) and delta = rowsum(dout ∘ out) then hold for the block as a part of all the keys).
TensorList AttentionForwardRaw(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double scale);
TensorList AttentionBackwardRaw(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, bool is_causal, double scale);

namespace attention_internal {
// The scores of the composed paths (the math backend in attention_math.cc, the create_graph backward in
// attention.cc): q·kᵀ·scale [..., T, S] from differentiable ops, with torch's is_causal mask (key j hidden
// from query i when j > i) applied as -inf when `causal`.
Tensor ScaledScores(const Tensor& q, const Tensor& k, double scale, bool causal);
}  // namespace attention_internal

}  // namespace tessel
