// dtensor/rules/scan_sort.cc — sharding rule for core/ops/scan_sort.cc's cumsum(x; dim, reverse).
//
// Invariant: each lane along `dim` is summed on one rank, so `dim` is never sharded (an input sharded on it is
// gathered first); every other dim keeps its sharding, and a Partial(sum) or Partial(avg) input stays Partial
// (running sums are linear); other Partials are reduced first.
//
// Example:
//   CumSum(x_S0, 1);   // rows sharded, sums along each row: no communication, out S(0)
//   CumSum(x_S0, 0);   // one all_gather, then [R]
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> CumSumRule(const OpCall& call) {
  ShardingState in = call.state(0);
  for (int a = 0; a < call.mesh_ndim(); ++a) {
    const Partial* p = std::get_if<Partial>(&in.placements[static_cast<size_t>(a)]);
    if (p != nullptr && p->reduce_op != comm::ReduceOp::kSum && p->reduce_op != comm::ReduceOp::kAvg) {
      in = SetAxis(in, a, Replicate{});
    }
  }
  if (call.spec(0).ndim() > 0) in = ReplicateDims(in, {call.attrs.GetInt("dim")});
  return One({in}, {OutputSpec{in, call.spec(0).shape(), {}}});
}

const bool kRegistered = [] {
  RegisterShardingRule("cumsum", CumSumRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
