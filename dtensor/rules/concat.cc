// dtensor/rules/concat.cc — sharding rules for core/ops/concat.cc: cat and stack.
//
// Invariant: every input of one call takes the same layout. cat needs its dim whole (a rank cannot hold a chunk
// of the concatenation from chunks of the pieces): its candidates are torch 2.15's (cat_single_dim_strategy,
// expanded over the mesh and priced as torch's). stack inserts a new unsharded dim and takes torch's merged
// follow layout (stack_strategy). Partials pass (both ops are linear). Inputs in a non-default shard order keep
// the older per-input candidates: one per distinct input layout, the cheapest winning, and everything
// replicated last.
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

// torch 2.15's cat (cat_single_dim_strategy): per mesh axis every input and the output Replicate, sharded on one
// dim other than the cat dim (when some input is sharded), or Partial of one op (sum, avg, min, max) alike.
std::vector<Strategy> CatRule(const OpCall& call) {
  if (!InputsInDefaultOrder(call)) return Concat(call, false);
  const int64_t dim = call.attrs.GetInt("dim");
  Shape shape = call.spec(0).shape();
  for (int i = 1; i < call.num_inputs(); ++i) {
    shape[static_cast<size_t>(dim)] += call.spec(i).shape()[static_cast<size_t>(dim)];
  }
  return ShardExceptDim(call, dim, {shape},
                        {comm::ReduceOp::kSum, comm::ReduceOp::kAvg, comm::ReduceOp::kMin, comm::ReduceOp::kMax});
}

// torch 2.15's stack (stack_strategy): one layout for every input, merged axis by axis from theirs (a Partial
// yields to a Shard, a Replicate to anything; two different Shards, or Partials of two ops, give Replicate); the
// output's dims from `dim` on shift by one.
std::vector<Strategy> StackRule(const OpCall& call) {
  if (!InputsInDefaultOrder(call)) return Concat(call, true);
  const int64_t dim = call.attrs.GetInt("dim");
  const DTensorSpec& x0 = call.spec(0);
  std::vector<Placement> follow = x0.placements();
  for (int i = 1; i < call.num_inputs(); ++i) {
    for (size_t a = 0; a < follow.size(); ++a) {
      const Placement& cur = follow[a];
      const Placement& next = call.spec(i).placement(static_cast<int>(a));
      if (cur == next) continue;
      if (IsPartial(cur)) {
        follow[a] = IsShard(next) ? next : IsPartial(next) ? Placement{Replicate{}} : cur;
      } else if (IsShard(cur)) {
        if (IsShard(next)) follow[a] = Replicate{};
      } else {
        follow[a] = next;
      }
    }
  }
  Shape shape = x0.shape();
  shape.insert(shape.begin() + dim, call.num_inputs());
  std::vector<int64_t> map(static_cast<size_t>(x0.ndim()));
  for (int64_t d = 0; d < x0.ndim(); ++d) map[static_cast<size_t>(d)] = d >= dim ? d + 1 : d;
  const ShardingState in = DefaultState(follow, x0.ndim());
  std::vector<Strategy> out(1);
  out[0].inputs.assign(static_cast<size_t>(call.num_inputs()), in);
  out[0].outputs.emplace_back(OutputSpec{RemapDims(in, map, static_cast<int64_t>(shape.size())), shape, {}});
  return out;
}

const bool kRegistered = [] {
  RegisterShardingRule("cat", CatRule);
  RegisterShardingRule("stack", StackRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
