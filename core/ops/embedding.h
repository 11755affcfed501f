// core/ops/embedding.h — embedding lookup (rows of a table by int64 index).
//
// Example:
//   Tensor x_BTC = Embedding(wte_VC, idx_BT);     // idx in [0, V); out-of-range → kOutOfRange
//   EmbeddingRenorm_(wte_VC, idx_BT, /*max_norm=*/1.0, /*norm_type=*/2.0);  // then look up: max_norm
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
// torch's scale_grad_by_freq as well: each position's gradient to the table is divided by how often its
// index occurs in `indices` (so a row's gradient is the mean over its occurrences, not their sum). Same
// values; out + (out - detach(out)) * (1/count - 1) carries the scale. Plain (non-distributed) indices.
Tensor Embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq);
// The normalized row (in [0, V)) of padding_idx for a table of `num_embeddings` rows; the check above.
int64_t NormalizePaddingIdx(int64_t padding_idx, int64_t num_embeddings);

// The rows of `source` [M, C] summed into a zero [num_rows, C] table at `index` [M] (int64), in index
// order: torch's index_add along dim 0 into zeros (the scatter-add an embedding's backward does).
// Differentiable in `source` (its gradient gathers the rows back); kOutOfRange for an index outside
// [0, num_rows).
Tensor IndexAddRows(const Tensor& source, const Tensor& index, int64_t num_rows);

// torch.embedding_renorm_ (Embedding's max_norm): every row of `weight` that `indices` names and whose
// norm_type-norm exceeds max_norm is scaled in place to max_norm (by max_norm / (norm + 1e-7), torch's
// factor); the other rows are untouched. Not recorded by autograd (torch runs it under no_grad), and
// the in-place write bumps the weight's version, so a weight saved for an earlier backward is caught.
// Plain (non-distributed) weights only: kUnimplemented for a DTensor table. Indices as Embedding's.
void EmbeddingRenorm_(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type);

}  // namespace tessel
