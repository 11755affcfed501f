// dtensor/rules/softmax.cc — sharding rules for core/ops/softmax.cc: softmax, log_softmax and their fused
// backward ops softmax_backward(grad, out), log_softmax_backward(grad, out).
//
// Invariant: each lane along `dim` is normalized on one rank, so `dim` is never sharded. The candidates are
// torch 2.15's (softmax_single_dim_strategy, _shard_except_dim_strategy): per mesh dim, every input and the
// output Replicate, or all sharded on one dim other than `dim` (when some input is sharded); a Partial input
// is reduced (softmax is not linear; torch reduces a Partial gradient of the backward ops too). An input
// sharded on `dim` is gathered, or moved to another dim when that costs less in torch's model.
//
// Example:
//   Softmax(scores_S1, -1);   // heads sharded on dim 1, normalized on the last dim: no communication
//   Softmax(x_S1, 1);         // dim 1 sharded: one all_gather, then [R]
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

int64_t SoftmaxDim(const OpCall& call, int input) {
  const int64_t nd = call.spec(input).ndim();
  return nd == 0 ? 0 : NormalizeDim(call.attrs.GetInt("dim"), nd, call.op.name.c_str());
}

std::vector<Strategy> SoftmaxRule(const OpCall& call) {
  return ShardExceptDim(call, SoftmaxDim(call, 0), {call.spec(0).shape()});
}

// (grad, out): both, and the gradient they give, in one layout with `dim` whole (torch's
// softmax_backward_single_dim_strategy: a Partial gradient is reduced first).
std::vector<Strategy> SoftmaxBackwardRule(const OpCall& call) {
  TESSEL_CHECK(call.spec(0).shape() == call.spec(1).shape(), call.op.name, ": grad and output shapes differ; call ",
               DescribeCall(call));
  return ShardExceptDim(call, SoftmaxDim(call, 1), {call.spec(1).shape()});
}

const bool kRegistered = [] {
  RegisterShardingRule("softmax", SoftmaxRule);
  RegisterShardingRule("log_softmax", SoftmaxRule);
  RegisterShardingRule("softmax_backward", SoftmaxBackwardRule);
  RegisterShardingRule("log_softmax_backward", SoftmaxBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
