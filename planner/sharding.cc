// planner/sharding.cc — CoordOf, LocalParams, BlocksOfStage (rules in the header).
#include <algorithm>
#include "planner/sharding.h"

#include "core/base/error.h"

namespace tessel::planner {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The dim of `fqn` that tensor parallelism shards, or -1 when it is replicated over tp.
int TpShardedDim(const std::string& fqn, bool sequence_parallel) {
  if (fqn == "wpe.weight") return sequence_parallel ? 0 : -1;  // rows = positions: each rank its T/tp
  const bool bias = EndsWith(fqn, ".bias");
  for (const char* col : {".attn.wq.", ".attn.wk.", ".attn.wv.", ".mlp.fc.", ".mlp.w1.", ".mlp.w3."}) {
    if (Contains(fqn, col)) return 0;
  }
  for (const char* row : {".attn.wo.", ".mlp.proj.", ".mlp.w2."}) {
    if (Contains(fqn, row)) return bias ? -1 : 1;
  }
  if (fqn == "wte.weight" || fqn == "lm_head.weight") return 0;
  return -1;
}

// Does stage `stage` of `layout` hold root parameter `fqn`?
bool RootOnStage(const ModelSpec& model, const Layout& layout, const std::string& fqn, int64_t stage) {
  const bool first = stage == 0, last = stage == layout.pp - 1;
  if (fqn == "wpe.weight") return first;
  if (fqn == "wte.weight") return first || (last && model.tie_embeddings);
  return last;  // ln_f.*, lm_head.weight
}

}  // namespace

MeshCoord CoordOf(const Layout& l, int64_t rank) {
  TESSEL_CHECK(rank >= 0 && rank < l.WorldSize(), "planner: rank ", rank, " is outside the world of ", l.WorldSize(),
               " ranks of ", l.ToString());
  MeshCoord c;
  c.tp = rank % l.tp;
  rank /= l.tp;
  c.dp_shard = rank % l.dp_shard;
  rank /= l.dp_shard;
  c.dp_replicate = rank % l.dp_replicate;
  c.pp = rank / l.dp_replicate;
  return c;
}

StageBlocks BlocksOfStage(const ModelSpec& model, const Layout& layout, int64_t stage) {
  // pipelining/model_split.cc's split: earlier stages take one block of the remainder each.
  const int64_t base = model.n_layers / layout.pp, extra = model.n_layers % layout.pp;
  return {stage * base + std::min(stage, extra), base + (stage < extra ? 1 : 0)};
}

std::vector<LocalParam> LocalParams(const ModelSpec& model, const Layout& l, const MeshCoord& c) {
  const StageBlocks blocks = BlocksOfStage(model, l, c.pp);
  std::vector<LocalParam> out;
  for (auto [fqn, shape] : model.ParameterShapes()) {
    const int block = BlockOf(fqn);
    const bool on_stage = block < 0 ? RootOnStage(model, l, fqn, c.pp)
                                    : block >= blocks.first && block < blocks.first + blocks.count;
    if (!on_stage) continue;
    const int dim = TpShardedDim(fqn, l.sequence_parallel);
    if (dim >= 0) shape[static_cast<size_t>(dim)] = ChunkSize(shape[static_cast<size_t>(dim)], l.tp, c.tp);
    const int64_t numel = NumElements(shape), rows = shape[0], row = rows > 0 ? numel / rows : 0;
    LocalParam p;
    p.fqn = fqn;
    p.block = block;
    // wte is a lookup, except as the tied head of the last stage.
    p.is_matmul_weight = shape.size() == 2 && fqn != "wpe.weight" &&
                         (fqn != "wte.weight" || (model.tie_embeddings && c.pp == l.pp - 1));
    p.tp_numel = numel;
    // A row-sharded lookup table (wte, and wpe under SP) gets its gradient from embedding_backward, which
    // has no masked form: the whole table's gradient is computed, then laid out as the parameter when .grad
    // takes it (autograd::SetLeafGradLayout: the rank's rows), so the buffer that stays is the piece.
    p.grad_numel = numel;
    p.partial_grad = l.sequence_parallel && l.tp > 1 && dim < 0;
    p.shard_numel = ChunkSize(rows, l.dp_shard, c.dp_shard) * row;
    p.padded_numel = (rows + l.dp_shard - 1) / l.dp_shard * row;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tessel::planner
