// dtensor/rules/concat.cc — sharding rules for core/ops/concat.cc: cat and stack.
//
// Invariant: every input of one call takes the same layout, following one of the inputs (one candidate
// per distinct input layout; the cheapest wins). cat needs its dim whole (a rank cannot hold a chunk of
// the concatenation from chunks of the pieces), so axes sharding it are gathered; stack inserts a new
// unsharded dim and keeps every other dim's sharding. Partial passes (both ops are linear), a Replicate
// input partitioned into the Partial of the followed one; everything replicated is the last candidate.
//
// Example:
//   Cat({q_S0, k_S0, v_S0}, -1);   // [S(0)] each -> [S(0)], no communication
//   Stack({a_S0, b_S0}, 0);        // [S(0)] -> [S(1)]
#include <algorithm>

#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> Concat(const OpCall& call, bool stack) {
  const int64_t dim = call.attrs.GetInt("dim");
  const DTensorSpec& x0 = call.spec(0);
  Shape shape = x0.shape();
  if (stack) {
    shape.insert(shape.begin() + dim, call.num_inputs());
  } else {
    shape[static_cast<size_t>(dim)] = 0;
    for (int i = 0; i < call.num_inputs(); ++i)
      shape[static_cast<size_t>(dim)] += call.spec(i).shape()[static_cast<size_t>(dim)];
  }
  std::vector<int64_t> map(static_cast<size_t>(x0.ndim()));
  for (int64_t d = 0; d < x0.ndim(); ++d) map[static_cast<size_t>(d)] = stack && d >= dim ? d + 1 : d;
  std::vector<Strategy> out;
  for (int i = 0; i < call.num_inputs(); ++i) {
    TESSEL_CHECK(call.defined(i), call.op.name, ": tensor ", i, " is undefined");
    const ShardingState in = stack ? call.state(i) : ReplicateDims(call.state(i), {dim});
    if (std::any_of(out.begin(), out.end(), [&](const Strategy& s) { return *s.inputs[0] == in; })) continue;
    Strategy s;
    s.inputs.assign(static_cast<size_t>(call.num_inputs()), in);
    s.outputs.emplace_back(OutputSpec{RemapDims(in, map, static_cast<int64_t>(shape.size())), shape, {}});
    out.push_back(std::move(s));
  }
  // Everything replicated, as PyTorch also offers: the way out when no input's layout suits the others, e.g.
  // Partials of different reduce ops (P(avg) next to P(sum)), which no layout that keeps a Partial can join.
  const std::vector<Placement> all_r(static_cast<size_t>(call.mesh_ndim()), Replicate{});
  const ShardingState replicated{all_r, ShardOrder(static_cast<size_t>(x0.ndim()))};
  if (std::none_of(out.begin(), out.end(), [&](const Strategy& s) { return *s.inputs[0] == replicated; })) {
    Strategy s;
    s.kind = StrategyKind::kReplicate;
    s.inputs.assign(static_cast<size_t>(call.num_inputs()), replicated);
    s.outputs.emplace_back(OutputSpec{ShardingState{all_r, ShardOrder(shape.size())}, shape, {}});
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Strategy> CatRule(const OpCall& call) { return Concat(call, false); }
std::vector<Strategy> StackRule(const OpCall& call) { return Concat(call, true); }

const bool kRegistered = [] {
  RegisterShardingRule("cat", CatRule);
  RegisterShardingRule("stack", StackRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
