// planner/data_parallel.cc — the ZeRO / fully_shard state and traffic of data_parallel.h.
#include "planner/data_parallel.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace tessel::planner {
namespace {

// Element sums over the rank's parameters: everything, and per block / root.
struct Sums {
  int64_t tp = 0, shard = 0, padded = 0, grad = 0;     // all parameters
  int64_t root_padded = 0, root_grad = 0, head_grad = 0;  // the root's own; lm_head + ln_f
  // Gradients a post-backward frees before it finishes the previous group's reduce-scatter: the root's
  // whole-table lookup gradients whose rank's rows are a view (TP) and its Partial ones (SP); the first
  // block's Partial ones.
  int64_t root_freed_grad = 0, first_block_partial = 0;
  int64_t max_block_padded = 0, max_block_tp = 0;
  int64_t first_block_padded = 0, first_block_grad = 0;  // the stage's first block
  bool root_runs_first = false;  // the root holds ln_f (the last stage): its backward runs before the blocks'
  // fully_shard's gradient flags (fsdp/collectives.h, [Note: FSDP gradient flags]) at the end of each
  // group's reduce-scatter block, when the reduction crosses ranks: the root's, the largest block's, the
  // first block's and all blocks' (elements per rank block).
  int64_t root_flags = 0, max_block_flags = 0, first_block_flags = 0, block_flags = 0;
  int64_t flags() const { return root_flags + block_flags; }
};

// GradFlagNumel of fsdp/collectives.h (the planner depends on core/ only): 16 flags per 16 parameters.
int64_t FlagNumel(int64_t num_params) { return (num_params + 15) / 16 * 16; }

// `flagged`: the gradient reduction of stage 3 crosses ranks (dp_shard or dp_replicate > 1).
Sums Sum(const std::vector<LocalParam>& params, bool flagged = false) {
  Sums s;
  std::map<int, std::tuple<int64_t, int64_t, int64_t>> blocks;  // block → (padded, tp, Partial grads)
  std::map<int, int64_t> counts;                                // group (-1: root) → parameters
  for (const LocalParam& p : params) {
    ++counts[p.block];
    s.tp += p.tp_numel;
    s.shard += p.shard_numel;
    s.padded += p.padded_numel;
    s.grad += p.grad_numel;
    if (p.block < 0) {
      s.root_runs_first = s.root_runs_first || p.fqn.rfind("ln_f.", 0) == 0;
      s.root_padded += p.padded_numel;
      s.root_grad += p.grad_numel;
      if (p.grad_numel > p.tp_numel || p.partial_grad) s.root_freed_grad += p.grad_numel;
      if (p.fqn.rfind("lm_head.", 0) == 0 || p.fqn.rfind("ln_f.", 0) == 0) s.head_grad += p.grad_numel;
    } else {
      std::get<0>(blocks[p.block]) += p.padded_numel;
      std::get<1>(blocks[p.block]) += p.tp_numel;
      if (p.partial_grad) std::get<2>(blocks[p.block]) += p.grad_numel;
    }
  }
  for (const auto& [block, sizes] : blocks) {
    s.max_block_padded = std::max(s.max_block_padded, std::get<0>(sizes));
    s.max_block_tp = std::max(s.max_block_tp, std::get<1>(sizes));
  }
  if (!blocks.empty()) {
    std::tie(s.first_block_padded, s.first_block_grad, s.first_block_partial) = blocks.begin()->second;
  }
  if (flagged) {
    for (const auto& [group, count] : counts) {
      const int64_t f = FlagNumel(count);
      if (group < 0) {
        s.root_flags = f;
        continue;
      }
      s.block_flags += f;
      if (group == blocks.begin()->first) s.first_block_flags = f;
      // The largest block's: blocks of one model have one parameter list, so the flags follow the size.
      if (std::get<0>(blocks[group]) == s.max_block_padded) s.max_block_flags = std::max(s.max_block_flags, f);
    }
  }
  return s;
}

bool Flagged(const Layout& l) { return l.zero_stage == 3 && (l.dp_shard > 1 || l.dp_replicate > 1); }

// The gradient buckets exactly as fsdp/replicate.cc builds them: parameters in reverse registration
// order, a new bucket once the next parameter would pass the cap (a parameter is never split, so one
// larger than the cap is a bucket of its own). `full` sums the elements, `block` the torch.chunk pieces
// padded to ceil(rows / n) rows (one rank's block of the ZeRO staging).
struct Bucket {
  int64_t full = 0, block = 0;
};
std::vector<Bucket> Buckets(const std::vector<LocalParam>& params, int64_t element_size, int64_t cap) {
  std::vector<Bucket> out(1);
  int64_t bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int64_t nbytes = element_size * it->tp_numel;
    if (bytes > 0 && bytes + nbytes > cap) {
      out.emplace_back();
      bytes = 0;
    }
    bytes += nbytes;
    out.back().full += it->tp_numel;
    out.back().block += it->padded_numel;
  }
  return out;
}

// The most elements of `field` alive at once with two buckets in flight (Replicate issues bucket k after
// finishing bucket k - 2): the largest sum of two consecutive buckets' (one bucket: itself).
int64_t TwoInFlight(const std::vector<Bucket>& b, int64_t Bucket::*field) {
  int64_t most = b.empty() ? 0 : b[0].*field;
  for (size_t k = 1; k < b.size(); ++k) most = std::max(most, b[k].*field + b[k - 1].*field);
  return most;
}
int64_t Largest(const std::vector<Bucket>& b, int64_t Bucket::*field) {
  int64_t most = 0;
  for (const Bucket& x : b) most = std::max(most, x.*field);
  return most;
}

// fully_shard under a pipeline schedule (examples/gpt/parallel_gpt.h): every group is unsharded for the
// whole step (UNSHARD, no reshard between microbatches), so params hold the padded shards and the full
// padded groups. With gradient sync off, each group's post-backward adds its parameters' .grad into an
// unsharded accumulation buffer and frees them; REDUCE_GRAD reduce-scatters those buffers in place
// into the sharded gradients. The grads peak is in the last microbatch's backward: every accumulation
// buffer (the stage's full parameters) plus the .grad still to be accumulated — the root's stay alive
// until the root's post-backward at the end of the backward, so on the stage with the head (it runs
// first) they overlap the largest block's, elsewhere the root's come last. comm: the largest group's
// all-gather output (n·S); the reduce-scatter reads the accumulation buffer and writes only the shard.
StateBytes PipelinedFullyShard(const Sums& s, const Layout& l, int64_t p, int64_t g, StateBytes b) {
  const int64_t n = l.dp_shard;
  b.params = p * (n + 1) * s.padded;
  const int64_t pending = s.root_runs_first ? s.root_grad + s.max_block_tp : std::max(s.root_grad, s.max_block_tp);
  // Accumulation buffers: the tp-local unsharded size, and every rank block's flags.
  b.grads = g * (s.tp + n * s.flags() + pending);
  b.comm = p * n * std::max(s.max_block_padded, s.root_padded);
  return b;
}

}  // namespace

StateBytes DataParallelState(const std::vector<LocalParam>& params, const Layout& l) {
  const Sums s = Sum(params, Flagged(l));
  const int64_t p = ElementSize(l.param_dtype), g = ElementSize(l.reduce_dtype);
  const int64_t o = 2 * ElementSize(l.optim_dtype) + (l.master_weights ? 4 : 0);
  const int64_t n = l.dp_shard;
  StateBytes b;
  b.optim = o * (l.zero_stage >= 1 ? s.shard : s.tp);
  // Without a data-parallel axis no gradient is reduced, so there is no bucket. The buckets follow the
  // parameters (a 262 MB lm_head of llama-7b in bf16 is a bucket of its own, two in flight), not one
  // bucket of at most the cap: that under-predicted the comm of real-sized models about tenfold.
  const std::vector<Bucket> buckets = Buckets(params, p, l.grad_bucket_bytes);
  switch (l.zero_stage) {
    case 0:
    case 1:
      b.params = p * s.tp;
      b.grads = g * s.grad;
      b.comm = l.Dp() > 1 ? g * TwoInFlight(buckets, &Bucket::full) : 0;  // each bucket's all-reduce buffer
      // ZeRO-1's all-gather of the updated rows after the step, bucket by bucket: n padded pieces.
      if (l.zero_stage == 1 && n > 1) b.comm = std::max(b.comm, p * n * Largest(buckets, &Bucket::block));
      break;
    case 2:
      b.params = p * s.tp;
      // The unsharded gradients of the bucket being filled (all of them while one bucket holds the
      // model), beside the rank's pieces of the buckets already reduced (an upper bound with several).
      b.grads = buckets.size() == 1 ? g * s.grad : g * (s.shard + Largest(buckets, &Bucket::full));
      // The reduce-scatter's staging of two buckets in flight (n padded pieces in, the rank's piece out),
      // or the post-step all-gather of one bucket's n pieces.
      b.comm = std::max(g * (n + 1) * TwoInFlight(buckets, &Bucket::block), p * n * Largest(buckets, &Bucket::block));
      break;
    default:
      if (l.pp > 1) return PipelinedFullyShard(s, l, p, g, b);
      // As fully_shard stores them: padded shards, the root and the current block unsharded.
      b.params = p * (s.padded + n * s.root_padded + n * s.max_block_padded);
      // The larger of memory_plan.h's two moments: the end of backward (the blocks' sharded gradients
      // and the root's unsharded ones) and the first block's post-backward (its unsharded gradients, the
      // other blocks' shards and the head's, computed before any block's). A post-backward finishes the
      // previous group's reduce-scatter after taking its own gradients, which frees those it converts
      // first (Sums::root_freed_grad, first_block_partial); at the end of backward the first block's is
      // still pending, so there the moment is the larger of before and after its shard arrives.
      // A block's sharded gradients are views of its reduce-scatter output, flags included.
      const int64_t blocks_shards = s.padded - s.root_padded + s.block_flags;
      const int64_t first_shard = s.first_block_padded + s.first_block_flags;
      const int64_t end = s.root_freed_grad == 0 ? blocks_shards + s.root_grad
                                                 : std::max(blocks_shards - first_shard + s.root_grad,
                                                            blocks_shards + s.root_grad - s.root_freed_grad);
      const int64_t first_block = s.first_block_grad - s.first_block_partial + blocks_shards - first_shard + s.head_grad;
      b.grads = g * std::max(end, first_block);
      const int64_t block_rs = s.max_block_padded + s.max_block_flags, root_rs = s.root_padded + s.root_flags;
      b.comm = n == 1 ? g * std::max(block_rs, root_rs)
                      : std::max(p * n * s.max_block_padded + g * (n + 1) * block_rs, g * (n + 1) * root_rs);
      break;
  }
  return b;
}

DpAxisBytes DataParallelAxisBytes(const std::vector<LocalParam>& params, const Layout& l) {
  const Sums s = Sum(params, Flagged(l));
  const int64_t p = ElementSize(l.param_dtype), g = ElementSize(l.reduce_dtype);
  const int64_t n = l.dp_shard, r = l.dp_replicate, m = l.num_microbatches;
  DpAxisBytes out;
  if (l.zero_stage == 3 && l.pp > 1) {
    // A pipeline's UNSHARD and REDUCE_GRAD: once per step (the reduce-scatter with the flags).
    out.dp_shard = (n - 1) * (p * s.padded + g * (s.padded + s.flags()));
  } else if (l.zero_stage == 3) {
    const int64_t block_padded = s.padded - s.root_padded;
    out.dp_shard = (n - 1) * (p * m * (2 * block_padded + s.root_padded) + g * (s.padded + s.flags()));
  } else if (l.zero_stage >= 1) {
    out.dp_shard = (n - 1) * (g + p) * s.padded;
  }
  const int64_t reduced = g * (l.zero_stage >= 1 ? s.shard + s.flags() : s.tp);
  out.dp_replicate = 2 * (r - 1) * reduced / r;
  return out;
}

}  // namespace tessel::planner
