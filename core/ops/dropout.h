// core/ops/dropout.h — dropout (torch.nn.functional.dropout): in training, each element is zeroed with
// probability p and the survivors are scaled by 1 / (1 - p).
//
// Invariant: the mask is a function of (generator seed, generator offset at the call, the element's
// index in the full tensor) only (core/ops/cuda/dropout_math.h), so it is the same on the CPU and on
// CUDA, for any thread count, and a DTensor computes on each rank exactly its shard of the mask the
// full tensor would get (Shard, Replicate and Partial inputs alike: no communication). Every call that
// draws advances `gen` by x's (global) numel, like torch's Philox offset. Backward is the same op
// (the mask is drawn again from the same counters, nothing is saved). Activation checkpointing replays
// it bit for bit when `gen` is listed in CheckpointOptions::generators.
//
// As torch: not training, p == 0 or an empty x returns x itself and draws nothing; p == 1 returns
// x · 0 (NaN stays NaN) and draws nothing; p outside [0, 1] is kInvalidArgument. The masks are not
// torch's (a different generator), so only their distribution matches.
//
// Example:
//   Generator gen(0);                              // same seed on every rank
//   Tensor h = Dropout(Gelu(x), 0.1, gen, module.training());
#pragma once

#include "core/dispatch/attrs.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace tessel {

Tensor Dropout(const Tensor& x, double p, Generator& gen, bool train = true);

// For the op's kernels (CPU and CUDA): where x lies in the full tensor whose mask it shares (the op's
// full_shape / block_offset attrs; absent: x itself at the origin), and the checked probability.
struct DropoutBlock {
  Shape full, at;
  int64_t first = 0;  // the full tensor's row-major index of x's first element
};
DropoutBlock DropoutBlockOf(const Tensor& x, const Attrs& attrs);
double DropoutProbability(const Attrs& attrs);

}  // namespace tessel
