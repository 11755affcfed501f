// dtensor/rules/batch_norm.cc — sharding rules for core/ops/batch_norm.cc: batch_norm(x [N, C, *], weight?,
// bias?) -> (y, mean [C], var [C]) and batch_norm_backward(g, x, weight?, mean, var) -> (dx, dweight, dbias).
//
// Invariant: statistics are per channel over the batch and spatial dims, so per mesh axis the channels may
// be sharded (x and g S(1), every [C] operand S(0)) or everything replicated; a batch- or spatially
// sharded x is gathered (its statistics span every rank's part; SyncBatchNorm is the data-parallel form).
//
// Example:
//   BatchNormTraining(x_S1, w_S0, b_S0, eps);   // y S(1), mean / var S(0), no communication
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> ForwardRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  TESSEL_CHECK(x.ndim() >= 2, "batch_norm: expected an input [N, C, *]; call ", DescribeCall(call));
  const Shape c = {x.shape()[1]};
  const std::vector<AxisOption> options = {
      {{Replicate{}, Replicate{}, Replicate{}}, {Replicate{}, Replicate{}, Replicate{}}, StrategyKind::kReplicate},
      {{Shard{1}, Shard{0}, Shard{0}}, {Shard{1}, Shard{0}, Shard{0}}, StrategyKind::kShard}};
  return CombineAxisOptions(call, options, {x.shape(), c, c});
}

std::vector<Strategy> BackwardRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(1);
  const Shape c = {x.shape()[1]};
  const std::vector<int64_t>& mask = call.attrs.GetInts("output_mask");
  const std::vector<AxisOption> options = {
      {std::vector<Placement>(5, Replicate{}), std::vector<Placement>(3, Replicate{}), StrategyKind::kReplicate},
      {{Shard{1}, Shard{1}, Shard{0}, Shard{0}, Shard{0}}, {Shard{1}, Shard{0}, Shard{0}}, StrategyKind::kShard}};
  const bool dw = mask[1] && call.defined(2);
  return CombineAxisOptions(call, options,
                            {mask[0] ? std::optional<Shape>(x.shape()) : std::nullopt,
                             dw ? std::optional<Shape>(c) : std::nullopt, mask[2] ? std::optional<Shape>(c) : std::nullopt});
}

const bool kRegistered = [] {
  RegisterShardingRule("batch_norm", ForwardRule);
  RegisterShardingRule("batch_norm_backward", BackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
