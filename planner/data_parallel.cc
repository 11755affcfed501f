// planner/data_parallel.cc — the ZeRO / fully_shard state and traffic of data_parallel.h.
#include "planner/data_parallel.h"

#include <algorithm>
#include <map>

namespace tessel::planner {
namespace {

// Element sums over the rank's parameters: everything, and per block / root.
struct Sums {
  int64_t tp = 0, shard = 0, padded = 0;      // all parameters
  int64_t root_padded = 0, root_tp = 0;       // the root's own
  int64_t max_block_padded = 0, max_block_tp = 0;
};

Sums Sum(const std::vector<LocalParam>& params) {
  Sums s;
  std::map<int, std::pair<int64_t, int64_t>> blocks;  // block → (padded, tp)
  for (const LocalParam& p : params) {
    s.tp += p.tp_numel;
    s.shard += p.shard_numel;
    s.padded += p.padded_numel;
    if (p.block < 0) {
      s.root_padded += p.padded_numel;
      s.root_tp += p.tp_numel;
    } else {
      blocks[p.block].first += p.padded_numel;
      blocks[p.block].second += p.tp_numel;
    }
  }
  for (const auto& [block, sizes] : blocks) {
    s.max_block_padded = std::max(s.max_block_padded, sizes.first);
    s.max_block_tp = std::max(s.max_block_tp, sizes.second);
  }
  return s;
}

}  // namespace

StateBytes DataParallelState(const std::vector<LocalParam>& params, const Layout& l) {
  const Sums s = Sum(params);
  const int64_t p = ElementSize(l.param_dtype), g = ElementSize(l.reduce_dtype);
  const int64_t o = 2 * ElementSize(l.optim_dtype) + (l.master_weights ? 4 : 0);
  const int64_t n = l.dp_shard;
  StateBytes b;
  b.optim = o * (l.zero_stage >= 1 ? s.shard : s.tp);
  switch (l.zero_stage) {
    case 0:
    case 1:
      b.params = p * s.tp;
      b.grads = g * s.tp;
      b.comm = std::min(kGradBucketBytes, g * s.tp);
      break;
    case 2:
      b.params = p * s.tp;
      b.grads = g * (s.shard + s.max_block_tp);
      b.comm = std::min(kGradBucketBytes, g * s.tp);
      break;
    default:
      // As fully_shard stores them: padded shards, the root and the current block unsharded.
      b.params = p * (s.padded + n * s.root_padded + n * s.max_block_padded);
      b.grads = g * (s.padded - s.root_padded + std::max(s.root_tp, s.max_block_tp));
      b.comm = n == 1 ? g * std::max(s.max_block_padded, s.root_padded)
                      : std::max(p * n * s.max_block_padded + g * (n + 1) * s.max_block_padded,
                                 g * (n + 1) * s.root_padded);
      break;
  }
  return b;
}

DpAxisBytes DataParallelAxisBytes(const std::vector<LocalParam>& params, const Layout& l) {
  const Sums s = Sum(params);
  const int64_t p = ElementSize(l.param_dtype), g = ElementSize(l.reduce_dtype);
  const int64_t n = l.dp_shard, r = l.dp_replicate, m = l.num_microbatches;
  DpAxisBytes out;
  if (l.zero_stage == 3) {
    const int64_t block_padded = s.padded - s.root_padded;
    out.dp_shard = (n - 1) * (p * m * (2 * block_padded + s.root_padded) + g * s.padded);
  } else if (l.zero_stage >= 1) {
    out.dp_shard = (n - 1) * (g + p) * s.padded;
  }
  const int64_t reduced = g * (l.zero_stage >= 1 ? s.shard : s.tp);
  out.dp_replicate = 2 * (r - 1) * reduced / r;
  return out;
}

}  // namespace tessel::planner
