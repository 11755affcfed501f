// dtensor/rules/softmax.cc — sharding rules for core/ops/softmax.cc: softmax, log_softmax and their fused
// backward ops softmax_backward(grad, out), log_softmax_backward(grad, out).
//
// Invariant: each lane along `dim` is normalized on one rank, so `dim` is never sharded: an input sharded
// on it is gathered (Replicate on those axes) first, every other dim keeps its sharding, and a Partial
// input is reduced (softmax is not linear). The backward ops are linear in the gradient: a Partial(sum)
// or Partial(avg) gradient passes through when the saved output is Replicate on that axis.
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
  const ShardingState in = ReplicateDims(PartialToReplicate(call.state(0)), {SoftmaxDim(call, 0)});
  return One({in}, {OutputSpec{in, call.spec(0).shape(), {}}});
}

// (grad, out): follow the saved output's layout with `dim` whole; a gradient that is Partial(sum/avg)
// where the output is Replicate may stay Partial.
std::vector<Strategy> SoftmaxBackwardRule(const OpCall& call) {
  TESSEL_CHECK(call.spec(0).shape() == call.spec(1).shape(), call.op.name, ": grad and output shapes differ; call ",
               DescribeCall(call));
  const int64_t dim = SoftmaxDim(call, 1);
  const ShardingState out = ReplicateDims(PartialToReplicate(call.state(1)), {dim});
  ShardingState grad = out;
  const ShardingState g = call.state(0);
  for (int a = 0; a < call.mesh_ndim(); ++a) {
    const Partial* p = std::get_if<Partial>(&g.placements[static_cast<size_t>(a)]);
    const bool linear = p != nullptr && (p->reduce_op == comm::ReduceOp::kSum || p->reduce_op == comm::ReduceOp::kAvg);
    if (linear && IsReplicate(out.placements[static_cast<size_t>(a)])) grad = SetAxis(grad, a, *p);
  }
  std::vector<Strategy> s = One({grad, out}, {OutputSpec{grad, call.spec(1).shape(), {}}});
  // Or follow the gradient's layout (the saved output moves instead).
  const ShardingState follow_g = ReplicateDims(PartialToReplicate(g), {dim});
  if (follow_g != out) {
    s.push_back(One({follow_g, follow_g}, {OutputSpec{follow_g, call.spec(1).shape(), {}}})[0]);
  }
  return s;
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
