// planner/sharding.h — where a rank's parameters live: its mesh coordinate, its pipeline stage's
// parameters, the tensor-parallel piece of each and the dp_shard piece of that (the order of
// DESIGN.md: pipeline split, then TP, then fully_shard on top of TP's local shard).
//
// Invariant: summing LocalParam::tp_numel over the ranks of one (pp, dp) coordinate and all tp ranks
// gives each stage's parameter count (tp-replicated parameters counted once per tp rank), and summing
// shard_numel over dp_shard gives tp_numel exactly (torch.chunk pieces, the padding is not stored).
//
// Rules (Megatron / torchtitan's LLaMA plan): attention wq, wk, wv and MLP fc / w1 / w3 are column-
// parallel (dim 0 of the weight and its bias), wo and proj / w2 row-parallel (dim 1; their biases
// replicated); wte and lm_head vocab-parallel (dim 0); wpe row-parallel (dim 0, positions) under
// sequence parallelism, else replicated; norms replicated. Stage s of pp holds
// blocks [s·L/pp, (s+1)·L/pp); wte and wpe live on the first stage, ln_f and lm_head on the last
// (a tied head on pp > 1 keeps a copy of wte on the last stage).
//
// Example:
//   MeshCoord c = CoordOf(layout, /*rank=*/5);              // (pp, dp_replicate, dp_shard, tp), tp fastest
//   for (const LocalParam& p : LocalParams(model, layout, c)) bytes += p.shard_numel * 2;
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/layout.h"
#include "planner/model_spec.h"

namespace tessel::planner {

struct MeshCoord {
  int64_t pp = 0, dp_replicate = 0, dp_shard = 0, tp = 0;
};
// REQUIRES: 0 <= rank < layout.WorldSize(). Mesh order (pp, dp_replicate, dp_shard, tp), row-major.
MeshCoord CoordOf(const Layout& layout, int64_t rank);

struct LocalParam {
  std::string fqn;
  int block = -1;             // transformer block index, -1 for the root (embeddings, ln_f, lm_head)
  int64_t tp_numel = 0;       // elements of this rank's tensor-parallel piece
  int64_t grad_numel = 0;     // elements of its gradient buffer: tp_numel (a row-sharded lookup's whole-table
                              // gradient is laid out as the parameter when .grad takes it)
  int64_t shard_numel = 0;    // elements of its dp_shard piece (dim 0 chunked over dp_shard)
  int64_t padded_numel = 0;   // ceil(rows / dp_shard) · row: what an all-gather moves per rank
  bool is_matmul_weight = false;  // a 2-D weight used in a GEMM (not wte / wpe lookups)
  // SP: replicated over tp and used on the sequence shard (norms, row-parallel biases): its gradient
  // comes out Partial, so fully_shard's post-backward reduces it into a new buffer and frees it first.
  bool partial_grad = false;
};

// This rank's parameters. The dp_shard pieces are those of zero_stage >= 1 (with zero_stage 0
// dp_shard is 1, so shard_numel == tp_numel).
std::vector<LocalParam> LocalParams(const ModelSpec& model, const Layout& layout, const MeshCoord& coord);

// Blocks of stage `stage`: [first, first + count).
struct StageBlocks {
  int64_t first = 0, count = 0;
};
StageBlocks BlocksOfStage(const ModelSpec& model, const Layout& layout, int64_t stage);

}  // namespace tessel::planner
