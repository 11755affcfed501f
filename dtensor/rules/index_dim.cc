// dtensor/rules/index_dim.cc — sharding rules for core/ops/index_dim.cc: gather_dim(x, index; dim), its
// gradient gather_dim_backward(grad, index; dim, length), scatter_add_dim(self, index, src; dim) and
// index_select_dim (a 1-D index, kept replicated) with its gradient.
//
// Invariant: every operand has the same sizes on every dim but `dim`, and each lane along `dim` is read or
// written on one rank, so `dim` is never sharded and the other dims are sharded alike on every operand (the
// first operand's layout, with `dim` gathered and Partial reduced, is what the others move to).
//
// Example:
//   GatherDim(logits_S0, 1, target_S0);   // rows sharded: no communication, out S(0)
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> IndexDimRule(const OpCall& call) {
  const int64_t dim = call.attrs.GetInt("dim");
  const ShardingState in = ReplicateDims(PartialToReplicate(call.state(0)), {dim});
  Shape out = call.spec(0).shape();  // scatter_add_dim: self's
  if (call.op.name == "gather_dim") out = call.spec(1).shape();
  if (call.op.name == "gather_dim_backward") out[static_cast<size_t>(dim)] = call.attrs.GetInt("length");
  std::vector<std::optional<ShardingState>> inputs(call.op.name == "scatter_add_dim" ? 3 : 2, in);
  return One(inputs, {OutputSpec{in, out, {}}});
}

// index_select_dim(x, index; dim) and its gradient (grad, index; dim, length): the 1-D index replicated, the first
// operand's other dims kept.
std::vector<Strategy> IndexSelectRule(const OpCall& call) {
  const int64_t dim = call.attrs.GetInt("dim");
  const ShardingState in = ReplicateDims(PartialToReplicate(call.state(0)), {dim});
  const ShardingState index = ReplicateDims(PartialToReplicate(call.state(1)), {0});
  Shape out = call.spec(0).shape();
  out[static_cast<size_t>(dim)] =
      call.op.name == "index_select_dim" ? call.spec(1).shape()[0] : call.attrs.GetInt("length");
  return One({in, index}, {OutputSpec{in, out, {}}});
}

const bool kRegistered = [] {
  RegisterShardingRule("index_select_dim", IndexSelectRule);
  RegisterShardingRule("index_select_dim_backward", IndexSelectRule);
  RegisterShardingRule("gather_dim", IndexDimRule);
  RegisterShardingRule("gather_dim_backward", IndexDimRule);
  RegisterShardingRule("scatter_add_dim", IndexDimRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
