// dtensor/rules/embedding.cc — sharding rules for core/ops/embedding.cc: embedding(weight [V, C],
// indices [...]) -> [..., C] and embedding_backward(grad [..., C], indices; num_weights) -> [V, C].
//
// Invariant (PyTorch's _embedding_ops.py): per mesh axis, embedding can
//   * replicate everything;
//   * shard the indices on a dim (weight Replicate) -> output sharded on that dim;
//   * shard the table's columns S(1) (indices Replicate) -> output sharded on its last dim;
//   * shard the table's rows (vocab) S(0) (indices Replicate) -> output Partial(sum) with masking
//     (PyTorch's MaskPartial): a rank looks up only the ids inside its row range [offset, offset + rows)
//     and writes zero rows for the others, so the sum over the axis is exactly the full lookup;
//   * pass a Partial(sum/avg) table through (the lookup is linear in the table).
// embedding_backward mirrors it (no masked form: a gradient of Replicate rows is Replicate; the
// optimizer chunks it for a vocab-sharded table): sharded indices + gradient -> Partial(sum) table
// gradient; gradient sharded on C -> table gradient S(1); Partial gradient -> Partial.
//
// Example (RowwiseParallel embedding on "tp"):
//   Embedding(w_S0, ids_R);     // [P(sum)], no communication; FullTensor() is one all_reduce
//   Embedding(w_R, ids_S0);     // [S(0)]
#include <cstring>

#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "dtensor/layout.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

using comm::ReduceOp;

// Lookup on this rank's rows [offset, offset + rows): other ids read row 0 and are zeroed after. Every
// id is first checked against the global [0, num_embeddings), as the dense kernel checks it: an id no
// rank owns would otherwise be zeroed on every rank and read as a zero row, silently.
TensorList MaskedEmbedding(const LocalContext& ctx) {
  const Tensor& w = ctx.locals[0];
  const ShardingState& ws = *ctx.strategy.inputs[0];
  const DTensorSpec& wspec = ctx.call.spec(0);
  const int64_t offset = ComputeLocalShapeAndGlobalOffset(wspec.shape(), ctx.call.mesh.shape(), ws.placements, ws.order,
                                                          ctx.call.mesh.coordinate())
                             .global_offset[0];
  const int64_t rows = w.size(0);
  Tensor ids = Empty(ctx.locals[1].sizes(), DType::kInt64, ctx.locals[1].device());
  CopyInto(ids, ctx.locals[1]);
  int64_t* p = ids.data_ptr<int64_t>();
  std::vector<int64_t> masked;
  const int64_t num_rows = wspec.shape()[0];
  for (int64_t i = 0; i < ids.numel(); ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, p[i] >= 0 && p[i] < num_rows, "embedding: index ", p[i],
                      " (at flat position ", i, " of indices ", ShapeStr(ids.sizes()), ") is out of range for weight ",
                      ShapeStr(wspec.shape()), " with ", num_rows, " rows (valid: 0 <= index < ", num_rows,
                      "), sharded over the vocabulary on rank ", ctx.call.mesh.global_rank());
    const int64_t local = p[i] - offset;
    const bool mine = local >= 0 && local < rows;
    p[i] = mine ? local : 0;
    if (!mine) masked.push_back(i);
  }
  const Shape out_shape = ctx.LocalOutputShape(0);
  if (rows == 0) return {Zeros(out_shape, w.dtype(), w.device())};
  const Tensor in[] = {w, ids};
  Tensor out = DispatchLocal(ctx.call.op, in, ctx.attrs)[0];
  const int64_t row_bytes = w.size(1) * ElementSize(w.dtype());
  char* po = static_cast<char*>(out.raw_data());
  for (int64_t i : masked) std::memset(po + i * row_bytes, 0, static_cast<size_t>(row_bytes));
  return {out};
}

std::vector<Strategy> EmbeddingRule(const OpCall& call) {
  const DTensorSpec& w = call.spec(0);
  const DTensorSpec& ids = call.spec(1);
  TESSEL_CHECK(w.ndim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim]; call ",
               DescribeCall(call));
  Shape out_shape = ids.shape();
  out_shape.push_back(w.shape()[1]);
  const int64_t nd = ids.ndim();
  std::vector<AxisOption> options = {{{Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate}};
  for (int64_t d = 0; d < nd; ++d) options.push_back({{Replicate{}, Shard{d}}, {Shard{d}}, StrategyKind::kShard});
  options.push_back({{Shard{1}, Replicate{}}, {Shard{nd}}, StrategyKind::kShard});
  options.push_back({{Shard{0}, Replicate{}}, {Partial{ReduceOp::kSum}}, StrategyKind::kMasked});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    options.push_back({{Partial{op}, Replicate{}}, {Partial{op}}, StrategyKind::kPartialLinear});
  }
  std::vector<Strategy> out = CombineAxisOptions(call, options, {out_shape});
  for (Strategy& s : out) {
    if (!AxesSharding(*s.inputs[0], 0).empty()) s.local_fn = MaskedEmbedding;
  }
  return out;
}

std::vector<Strategy> EmbeddingBackwardRule(const OpCall& call) {
  const DTensorSpec& g = call.spec(0);
  const DTensorSpec& ids = call.spec(1);
  TESSEL_CHECK(g.ndim() == ids.ndim() + 1, "embedding_backward: grad must be indices shape + [C]; call ",
               DescribeCall(call));
  const Shape out_shape = {call.attrs.GetInt("num_weights"), g.shape().back()};
  const int64_t nd = ids.ndim();
  std::vector<AxisOption> options = {{{Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate}};
  for (int64_t d = 0; d < nd; ++d) {
    options.push_back({{Shard{d}, Shard{d}}, {Partial{ReduceOp::kSum}}, StrategyKind::kContract});
  }
  options.push_back({{Shard{nd}, Replicate{}}, {Shard{1}}, StrategyKind::kShard});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    options.push_back({{Partial{op}, Replicate{}}, {Partial{op}}, StrategyKind::kPartialLinear});
  }
  return CombineAxisOptions(call, options, {out_shape});
}

const bool kRegistered = [] {
  RegisterShardingRule("embedding", EmbeddingRule);
  RegisterShardingRule("embedding_backward", EmbeddingBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
