// dtensor/rules/scan_sort.cc — sharding rule for core/ops/scan_sort.cc's cumsum(x; dim, reverse).
//
// Invariant: each lane along `dim` is summed on one rank, so `dim` is never sharded. The candidates are torch
// 2.15's (scan_single_dim_strategy): per mesh dim, Replicate, a Shard of another dim (when the input is
// sharded), or Partial(sum) / Partial(avg) kept (running sums are linear); other Partials are reduced first.
//
// Example:
//   CumSum(x_S0, 1);   // rows sharded, sums along each row: no communication, out S(0)
//   CumSum(x_S0, 0);   // one all_gather, then [R]
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> CumSumRule(const OpCall& call) {
  const int64_t nd = call.spec(0).ndim();
  const int64_t dim = nd == 0 ? 0 : NormalizeDim(call.attrs.GetInt("dim"), nd, "cumsum");
  return ShardExceptDim(call, dim, {call.spec(0).shape()}, {comm::ReduceOp::kSum, comm::ReduceOp::kAvg});
}

const bool kRegistered = [] {
  RegisterShardingRule("cumsum", CumSumRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
