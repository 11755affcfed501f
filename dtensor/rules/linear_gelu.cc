// dtensor/rules/linear_gelu.cc — sharding rules for core/ops/linear_gelu.cc: linear_gelu(x, w, b?) →
// [out = gelu(pre), pre = x · wᵀ + b], and gelu_precomputed(out, pre) → out (pointwise).
//
// Invariant: a candidate is linear's (dtensor/rules/matmul.cc) whose output is Shard or Replicate on
// every mesh axis, with pre taking out's layout. gelu is pointwise, so it commutes with Shard and
// Replicate (ColwiseParallel's Shard(-1) output, batch-sharded rows); but gelu(a + b) ≠ gelu(a) +
// gelu(b), so linear's Partial outputs (a sharded contraction: RowwiseParallel, or a Partial input) are
// dropped, and the dispatcher then redistributes the inputs to a non-Partial candidate (at worst
// all-Replicate, which linear's rule always offers). So no candidate ever applies gelu to a partial sum.
//
// Example (TP on a 1-D mesh "tp"):
//   LinearGelu(x_R, w_S0, b_S0, "tanh");   // Colwise: out, pre [S(-1)], no communication
//   LinearGelu(h_S1, w_S1, b_R, "tanh");   // Rowwise inputs: all-gathered first, out, pre [R]
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> LinearGeluRule(const OpCall& call) {
  const RuleEntry* linear = FindShardingRule("linear");
  TESSEL_INTERNAL_ASSERT(linear != nullptr && linear->rule != nullptr, "linear_gelu: linear has no sharding rule");
  std::vector<Strategy> kept;
  for (Strategy& s : linear->rule(call)) {
    const OutputSpec out = *s.outputs.at(0);
    if (HasPartial(out.state)) continue;
    s.outputs.emplace_back(out);  // pre
    kept.push_back(std::move(s));
  }
  TESSEL_INTERNAL_ASSERT(!kept.empty(), "linear_gelu: linear's rule offered no all-Replicate candidate");
  return kept;
}

const bool kRegistered = [] {
  RegisterShardingRule("linear_gelu", LinearGeluRule);
  // gelu_precomputed(out, pre) → out: pointwise on two tensors of one layout (linear_gelu's outputs);
  // a Partial input (never produced by linear_gelu) would be reduced first, as for gelu.
  RegisterShardingRule("gelu_precomputed", PointwiseRule<Linearity::kNone>, kElementwise);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
