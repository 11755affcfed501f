// core/ops/embedding.h — embedding lookup (rows of a table by int64 index).
//
// Example:
//   Tensor x_BTC = Embedding(wte_VC, idx_BT);     // idx in [0, V); out-of-range → kOutOfRange
#pragma once

#include <optional>

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Embedding(const Tensor& weight, const Tensor& indices);

// torch's padding_idx (negative counts from the end; kInvalidArgument outside [-V, V)): the positions
// that look up that row pass no gradient to the weight, so the row never learns from them. Same
// values as the lookup; the gradient is blocked by a where over those positions (their outputs are
// detached), not by the kernel. nullopt: the plain lookup.
Tensor Embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx);
// The normalized row (in [0, V)) of padding_idx for a table of `num_embeddings` rows; the check above.
int64_t NormalizePaddingIdx(int64_t padding_idx, int64_t num_embeddings);

}  // namespace tessel
