// pipelining/microbatch.h — splitting a batch into microbatches along dim 0 and the loss weights that
// make the microbatched step equal the full-batch step (torch.distributed.pipelining.microbatch).
//
// Sizes follow torch.tensor_split(x, n) (what PyTorch's split_args_kwargs_into_chunks uses): with
// rows = q·n + r, the first r microbatches have q + 1 rows and the others q. Fewer rows than
// microbatches is an error (PyTorch would produce empty microbatches; an empty stage input is useless).
//
// Invariant: the microbatches are views of the input covering its rows in order, once each; the loss
// weights sum to 1 and weight i = rows_i / rows, so for a loss that is a mean over dim 0 (or over
// dim 0 × fixed trailing dims, like next-token cross-entropy over [B, T]),
//   Σ_i weight_i · mean_loss(microbatch_i) = mean_loss(batch)
// and the gradients of the weighted microbatch losses, accumulated in .grad, are the full-batch
// gradients (in exact arithmetic; fp32 agrees to rounding, the equivalence tests allow 1e-5 relative).
// A loss that averages over a data-dependent count (cross-entropy over the targets that are not
// ignore_index) takes weight_i = count_i / Σ count instead (MicrobatchLossWeightsFromCounts), which makes
// the same identity hold for it; PipelineGPT does this by default.
//
// Example:
//   std::vector<Tensor> mbs = SplitMicrobatches(idx_BT, 4);      // 10 rows → 3, 3, 2, 2
//   std::vector<double> w = MicrobatchLossWeights(10, 4);        // 0.3, 0.3, 0.2, 0.2
//   Tensor loss = MulScalar(CrossEntropy(logits_i, targets_i), w[i]);   // backward from this
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel::pipelining {

// Rows of each microbatch. Throws kInvalidArgument when num_microbatches < 1 or rows < num_microbatches.
std::vector<int64_t> MicrobatchSizes(int64_t rows, int num_microbatches);

// Views of `batch` along dim 0. REQUIRES: batch.dim() >= 1 (kInvalidArgument naming the shape).
std::vector<Tensor> SplitMicrobatches(const Tensor& batch, int num_microbatches);

// rows_i / rows for each microbatch.
std::vector<double> MicrobatchLossWeights(int64_t rows, int num_microbatches);

// count_i / Σ count for a loss that is a mean over count_i elements of microbatch i (the targets that are
// not ignored): Σ_i weight_i · mean_i = Σ_i sum_i / Σ count, the full batch's mean. A microbatch with
// count 0 gets weight 0 (the stage then backpropagates zeros instead of its 0/0 mean); when every count
// is 0 the full-batch mean is 0/0 too, and `fallback` (the row weights) is returned so the step's loss is
// that NaN, as on one rank. REQUIRES: counts >= 0 (kInvalidArgument).
std::vector<double> MicrobatchLossWeightsFromCounts(const std::vector<int64_t>& counts, std::vector<double> fallback);

// Targets that are not ignore_index: the denominator of cross-entropy's mean (ExecutorOptions::loss_denominator).
int64_t CountNotIgnored(const Tensor& targets, int64_t ignore_index = -100);

// Concatenates microbatch outputs back along dim 0 (torch's merge_chunks for tensors).
Tensor MergeMicrobatches(const std::vector<Tensor>& microbatches);

}  // namespace tessel::pipelining
