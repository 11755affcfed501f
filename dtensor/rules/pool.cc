// dtensor/rules/pool.cc — sharding rules for core/ops/pool.cc: window_max(x [P, L], index [K, O]) ->
// (values [P, O], arg [P, O]), gather_last_dim(x [P, L], idx [P, O]) -> [P, O] and
// scatter_add_last_dim(src [P, O], idx [P, O]; length) -> [P, length].
//
// Invariant: each row p is computed from row p alone, so per mesh axis the rows may be sharded
// (x / src / idx S(0) -> every output S(0); the window index stays Replicate) or everything
// replicated. A sharded row length (L or O) is gathered by the all-Replicate option.
//
// Example (pooling a batch-sharded activation, whose [N·C, H·W] view is S(0)):
//   WindowMax(x_S0, index_R);   // values and positions S(0), no communication
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> WindowMaxRule(const OpCall& call) {
  TESSEL_CHECK(call.spec(0).ndim() == 2 && call.spec(1).ndim() == 2, "window_max: expected x [P, L] and index [K, O]; ",
               "call ", DescribeCall(call));
  const Shape out = {call.spec(0).shape()[0], call.spec(1).shape()[1]};
  const std::vector<AxisOption> options = {
      {{Replicate{}, Replicate{}}, {Replicate{}, Replicate{}}, StrategyKind::kReplicate},
      {{Shard{0}, Replicate{}}, {Shard{0}, Shard{0}}, StrategyKind::kShard}};
  return CombineAxisOptions(call, options, {out, out});
}

// gather_last_dim and scatter_add_last_dim: rows of both operands together.
std::vector<Strategy> RowsRule(const OpCall& call) {
  TESSEL_CHECK(call.spec(0).ndim() == 2 && call.spec(1).ndim() == 2, call.op.name, ": expected [P, *] operands; call ",
               DescribeCall(call));
  const int64_t rows = call.spec(0).shape()[0];
  // gather: idx's columns; scatter-add: the row length it names
  const int64_t cols = call.op.name == "scatter_add_last_dim" ? call.attrs.GetInt("length") : call.spec(1).shape()[1];
  const Shape out = {rows, cols};
  const std::vector<AxisOption> options = {{{Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate},
                                           {{Shard{0}, Shard{0}}, {Shard{0}}, StrategyKind::kShard}};
  return CombineAxisOptions(call, options, {out});
}

const bool kRegistered = [] {
  RegisterShardingRule("window_max", WindowMaxRule);
  RegisterShardingRule("gather_last_dim", RowsRule);
  RegisterShardingRule("scatter_add_last_dim", RowsRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
