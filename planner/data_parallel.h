// planner/data_parallel.h — the data-parallel terms of the plan: the state ledgers (params, grads,
// optimizer) under ZeRO stages 0–3 over dp_shard, their comm buffers, and the bytes the dp_shard and
// dp_replicate axes move per step. Stage 3 follows tessel's fully_shard (planner/memory_plan.h's
// derivation: one unit per block plus the root, blocks reshard after forward, the root does not).
//
// Invariant: with n = dp_shard and P the rank's tensor-parallel piece of its stage's parameters
// (bytes per element: p = param dtype, g = reduce dtype, o = optimizer dtype), the sharded state is
//   stage 0:  params p·P      grads g·P      optim (2o + 4·master)·P
//   stage 1:  params p·P      grads g·P      optim (2o + 4·master)·P/n
//   stage 2:  params p·P      grads g·P/n    optim (2o + 4·master)·P/n
//   stage 3:  params p·P/n    grads g·P/n    optim (2o + 4·master)·P/n
// (P/n is this rank's torch.chunk piece of each parameter's dim 0; fully_shard stores stage 3's
// parameters and gradients padded to ceil(rows / n) rows) — the ZeRO paper's Figure 1 — plus
// the transient full-size pieces each stage needs. Stages 0-2 reduce in gradient buckets built as
// fsdp/replicate.cc builds them (Layout::grad_bucket_bytes, reverse registration order, a parameter never
// split; none without data parallelism), two in flight: stage 0-1 comm the largest two consecutive
// buckets, stage 1 also the all-gather of the updated rows (n padded pieces of the largest bucket),
// stage 2 the unsharded gradients of the largest bucket beside the rank's pieces (grads; exact with one
// bucket, an upper bound with more) and the reduce-scatter staging of two buckets, n + 1 padded pieces
// each (comm). Stage 3: the root and the current block unsharded (params), one block's unsharded
// gradients, and in comm the prefetched block's all-gather (n·S) and the reduce-scatter staging
// ((n + 1)·S), S the largest block's padded shard. Whenever stage 3's reduction crosses ranks, each group's
// reduce-scatter block (S) also carries 16 gradient flags per 16 parameters (fsdp/collectives.h), in the
// staging, in the sharded gradients (views of the output) and in the bytes sent. Stage 3 under a pipeline (pp > 1: every group
// unsharded for the step, gradients accumulated unsharded and reduce-scattered once by REDUCE_GRAD):
// params (n + 1)·p·padded, grads the stage's unsharded gradients plus the .grad awaiting accumulation,
// comm the largest group's all-gather (tests/planner_grid_test.cc holds every case to measurement).
//
// Example:
//   StateBytes s = DataParallelState(LocalParams(model, layout, coord), layout);
#pragma once

#include <cstdint>
#include <vector>

#include "planner/layout.h"
#include "planner/sharding.h"

namespace tessel::planner {

struct StateBytes {
  int64_t params = 0, grads = 0, optim = 0, comm = 0;
};

// DDP's gradient bucket (torch DistributedDataParallel's bucket_cap_mb = 25): the comm buffer of
// stages 0-2, where gradients are reduced bucket by bucket.
inline constexpr int64_t kGradBucketBytes = 25 * 1024 * 1024;

StateBytes DataParallelState(const std::vector<LocalParam>& params, const Layout& layout);

// Bytes this rank sends per step over each dp axis (ring collectives: an all-gather or reduce-scatter
// sends (n − 1) shards, an all-reduce of N bytes 2·(n − 1)/n·N):
//   dp_shard, stage 3: every microbatch all-gathers the blocks twice (forward, and backward after the
//     reshard) and the root once; the gradients are reduce-scattered once per step (3Ψ in the ZeRO
//     paper's terms). Under a pipeline (pp > 1) every group is all-gathered once per step (UNSHARD)
//     and reduce-scattered once (REDUCE_GRAD): 2Ψ. Stages 1-2: one reduce-scatter of the gradients and one all-gather of the
//     updated parameters (2Ψ, the same as DDP's all-reduce).
//   dp_replicate: an all-reduce of the (dp_shard-reduced) gradient shard (all of P at stage 0).
struct DpAxisBytes {
  int64_t dp_shard = 0, dp_replicate = 0;
};
DpAxisBytes DataParallelAxisBytes(const std::vector<LocalParam>& params, const Layout& layout);

}  // namespace tessel::planner
