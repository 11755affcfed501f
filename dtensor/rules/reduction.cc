// dtensor/rules/reduction.cc — sharding rules for core/ops/reduction.cc: sum, mean, amax, max (values +
// indices), norm, and the backward ops sum_backward, max_backward.
//
// Invariant: a reduction never gathers its input. A sharded reduced dim makes the output Partial on
// that axis — sum: P(sum); mean: P(avg) of local means, as torch's, or on uneven shards P(sum) of local
// sums scaled by 1 / (global count) (a mean of unequal local means would weight ranks wrongly); amax and
// inf-norm: P(max) (an empty local shard contributes -inf); 1-norm: P(sum). A p-norm for other p computes
// local sums of |x|^p, all-reduces them over the reducing axes (one all_reduce per axis, declared in the
// cost) and takes the p-th root, so the output is Replicate there. max(dim) needs its dim whole (its
// indices are global positions), so that dim is replicated first. Kept dims keep their sharding;
// Partial(sum) inputs pass through sum, Partial(avg) through mean, Partial(max) through amax; other Partials
// are reduced first, reduce-scattered onto a kept dim when that is cheaper (sum, amax, max and mean list
// torch 2.15's single-dim strategies, expanded over the mesh by ExpandAxisOptions). The backward ops broadcast
// the gradient back in its own layout and rewrite their global "shape" attr to this rank's local shape.
//
// Example:
//   Sum(x_S0, {0});           // [S(0)] -> [P(sum)], no communication
//   Mean(x_S1, {0});          // [S(1)] -> [S(1)]: dim 0 is whole on every rank
//   Mean(x_S0, {0});          // [S(0)] -> [P(avg)] (even rows), no communication
//   Norm(g_S0, 2.0);          // one all_reduce of a scalar, [R]
#include <cmath>
#include <limits>

#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/tensor/factory.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

using comm::ReduceOp;

// Input dim d -> output dim (-1 for a reduced dim; with keepdim the reduced dim stays but is unsharded).
std::vector<int64_t> ReduceDimMap(const std::vector<char>& reduced, bool keepdim) {
  std::vector<int64_t> map(reduced.size(), -1);
  int64_t j = 0;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) map[d] = keepdim ? static_cast<int64_t>(d) : j;
    if (!reduced[d] || keepdim) ++j;
  }
  return map;
}

Shape ReducedShape(const Shape& shape, const std::vector<char>& reduced, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) out.push_back(shape[d]);
    if (reduced[d] && keepdim) out.push_back(1);
  }
  return out;
}

// Axes of `s` that shard a reduced dim.
std::vector<int64_t> ReducingAxes(const ShardingState& s, const std::vector<char>& reduced) {
  std::vector<int64_t> axes;
  for (size_t a = 0; a < s.placements.size(); ++a) {
    const Shard* sh = std::get_if<Shard>(&s.placements[a]);
    if (sh != nullptr && reduced[static_cast<size_t>(sh->dim)]) axes.push_back(static_cast<int64_t>(a));
  }
  return axes;
}

// Partial axes whose op is not in `keep` become Replicate (the input is reduced first).
ShardingState KeepPartials(ShardingState s, std::initializer_list<ReduceOp> keep) {
  for (size_t a = 0; a < s.placements.size(); ++a) {
    const Partial* p = std::get_if<Partial>(&s.placements[a]);
    if (p != nullptr && std::find(keep.begin(), keep.end(), p->reduce_op) == keep.end()) {
      s = SetAxis(s, static_cast<int>(a), Replicate{});
    }
  }
  return s;
}

struct Reduction {
  std::vector<char> reduced;
  bool keepdim = false;
  Shape out_shape;
};

Reduction ReductionOf(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  Reduction r;
  r.reduced = ReducedMask(call.attrs.GetInts("dims"), x.ndim(), call.op.name.c_str());
  r.keepdim = call.attrs.GetBool("keepdim");
  r.out_shape = ReducedShape(x.shape(), r.reduced, r.keepdim);
  return r;
}

std::vector<Strategy> Reduce(const OpCall& call, const ShardingState& in, const Placement& dropped,
                             const Reduction& r) {
  ShardingState out =
      RemapDims(in, ReduceDimMap(r.reduced, r.keepdim), static_cast<int64_t>(r.out_shape.size()), dropped);
  return One({in}, {OutputSpec{std::move(out), r.out_shape, {}}},
             ReducingAxes(in, r.reduced).empty() ? StrategyKind::kFollow : StrategyKind::kContract);
}

// torch 2.15's linear reductions (linear_reduction_single_dim_strategy: sum, amax, ...): per mesh axis
// Replicate; for each input dim (when some input is sharded) its Shard, giving Partial(op) for a reduced dim and
// the output's Shard for a kept one; Partial(op) through.
// The per-axis options of those reductions (and of mean, with op avg).
std::vector<AxisOption> ReductionOptions(const OpCall& call, const Reduction& r, ReduceOp op) {
  const std::vector<int64_t> map = ReduceDimMap(r.reduced, r.keepdim);
  std::vector<AxisOption> options{{{Replicate{}}, {Replicate{}}, StrategyKind::kReplicate}};
  if (AnyInputSharded(call)) {
    for (int64_t d = 0; d < call.spec(0).ndim(); ++d) {
      const size_t u = static_cast<size_t>(d);
      options.push_back({{Shard{d}}, {r.reduced[u] ? Placement{Partial{op}} : Placement{Shard{map[u]}}}});
    }
  }
  options.push_back({{Partial{op}}, {Partial{op}}});
  return options;
}

std::vector<Strategy> LinearReduction(const OpCall& call, ReduceOp op) {
  const Reduction r = ReductionOf(call);
  return ExpandAxisOptions(call, ReductionOptions(call, r, op), {r.out_shape});
}

std::vector<Strategy> SumRule(const OpCall& call) { return LinearReduction(call, ReduceOp::kSum); }

// Local sum scaled by 1 / (global count of reduced elements): exact on uneven shards.
TensorList MeanLocal(const LocalContext& ctx) {
  const DTensorSpec& x = ctx.call.spec(0);
  const std::vector<char> reduced = ReducedMask(ctx.attrs.GetInts("dims"), x.ndim(), "mean");
  double count = 1;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d]) count *= static_cast<double>(x.shape()[d]);
  }
  const TensorList sum = DispatchLocal(GetOp("sum"), ctx.locals, ctx.attrs);
  return DispatchLocal(GetOp("mul_scalar"), sum, Attrs().Set("value", 1.0 / count));
}

// PyTorch 2.15's mean (mean_single_dim_strategy): per mesh axis Replicate, a reduced dim's Shard making
// Partial(avg) of local means, a kept dim's Shard, or Partial(avg) through; a Partial(sum) input is reduced
// first (torch never converts it to an average). Torch drops a candidate whose reduced dims are sharded
// unevenly (a mean of unequal local means is wrong) and so gathers them; here that candidate is kept exact
// instead: its reducing axes give Partial(sum) of local sums over the global count (MeanLocal).
std::vector<Strategy> MeanRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  TESSEL_CHECK(IsFloating(x.dtype()), "mean: expected a floating dtype, got ", x.dtype(), "; call ",
               DescribeCall(call));
  const Reduction r = ReductionOf(call);
  std::vector<Strategy> s = ExpandAxisOptions(call, ReductionOptions(call, r, ReduceOp::kAvg), {r.out_shape});
  for (Strategy& c : s) {
    const ShardingState& in = *c.inputs[0];
    bool uneven = false;
    for (int64_t d = 0; d < x.ndim(); ++d) {
      uneven = uneven || (r.reduced[static_cast<size_t>(d)] && x.shape()[d] % NumShards(in, d, call.mesh) != 0);
    }
    if (!uneven) continue;
    c.local_fn = MeanLocal;
    for (int64_t a : ReducingAxes(in, r.reduced)) {
      c.outputs[0]->state = SetAxis(c.outputs[0]->state, static_cast<int>(a), Partial{ReduceOp::kSum});
    }
  }
  return s;
}

// amax whose local reduced extent may be empty (uneven shards): -inf there, the identity of max.
TensorList AmaxLocal(const LocalContext& ctx) {
  const Tensor& x = ctx.locals[0];
  const Shape out_shape = ctx.LocalOutputShape(0);
  if (x.numel() == 0 && NumElements(out_shape) > 0) {
    return {Full(out_shape, -std::numeric_limits<double>::infinity(), x.dtype(), x.device())};
  }
  return DispatchLocal(ctx.call.op, ctx.locals, ctx.attrs);
}

std::vector<Strategy> AmaxRule(const OpCall& call) {
  std::vector<Strategy> s = LinearReduction(call, ReduceOp::kMax);
  for (Strategy& c : s) c.local_fn = AmaxLocal;
  return s;
}

// p-norm over sharded dims: (all_reduce_sum(local_norm^p))^(1/p) on the reducing axes (aux).
TensorList NormLocal(const LocalContext& ctx) {
  const double p = ctx.attrs.GetDouble("p");
  Tensor t = DispatchLocal(ctx.call.op, ctx.locals, ctx.attrs)[0];
  const Tensor tp[] = {t};
  Tensor u = DispatchLocal(GetOp("pow"), tp, Attrs().Set("exponent", p))[0];
  for (int64_t axis : ctx.strategy.aux) {
    ctx.call.mesh.axis_group(static_cast<int>(axis))->AllReduce(u, ReduceOp::kSum)->Wait();
  }
  const Tensor up[] = {u};
  return DispatchLocal(GetOp("pow"), up, Attrs().Set("exponent", 1.0 / p));
}

std::vector<Strategy> NormRule(const OpCall& call) {
  const double p = call.attrs.GetDouble("p");
  const Reduction r = ReductionOf(call);
  const ShardingState in = PartialToReplicate(call.state(0));
  if (p == 1.0) return Reduce(call, in, Partial{ReduceOp::kSum}, r);
  if (std::isinf(p) && p > 0) return Reduce(call, in, Partial{ReduceOp::kMax}, r);
  std::vector<Strategy> s = Reduce(call, in, Replicate{}, r);
  s[0].aux = ReducingAxes(in, r.reduced);
  if (!s[0].aux.empty()) {
    s[0].local_fn = NormLocal;
    const int64_t out_bytes = NumElements(r.out_shape) * ElementSize(call.spec(0).dtype());
    for (int64_t a : s[0].aux) s[0].extra_comm_bytes += 2 * out_bytes * (call.mesh.size(static_cast<int>(a)) - 1);
  }
  return s;
}

// torch 2.15's max.dim (max_min_dim_single_dim_strategy): per mesh axis Replicate, or a Shard of a kept dim for
// the values and the indices (when the input is sharded); the reduced dim whole, a Partial input reduced.
std::vector<Strategy> MaxRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  const int64_t dim = x.ndim() == 0 ? 0 : NormalizeDim(call.attrs.GetInt("dim"), x.ndim(), "max");
  Reduction r;
  r.reduced.assign(static_cast<size_t>(x.ndim()), 0);
  if (x.ndim() > 0) r.reduced[static_cast<size_t>(dim)] = 1;
  r.keepdim = call.attrs.GetBool("keepdim");
  r.out_shape = ReducedShape(x.shape(), r.reduced, r.keepdim);
  const std::vector<int64_t> map = ReduceDimMap(r.reduced, r.keepdim);
  std::vector<AxisOption> options{{{Replicate{}}, {Replicate{}, Replicate{}}, StrategyKind::kReplicate}};
  if (AnyInputSharded(call)) {
    for (int64_t d = 0; d < x.ndim(); ++d) {
      const Placement out = Shard{map[static_cast<size_t>(d)]};
      if (d != dim) options.push_back({{Shard{d}}, {out, out}});
    }
  }
  return ExpandAxisOptions(call, options, {r.out_shape, r.out_shape});
}

// The gradient g (reduced shape) broadcast back to `shape`: g's layout mapped onto the kept dims.
ShardingState BroadcastBack(const ShardingState& g, const std::vector<char>& reduced, bool keepdim) {
  std::vector<int64_t> map;
  std::vector<int64_t> degenerate;  // sharded size-1 (keepdim) reduced dims of g
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d] || keepdim) map.push_back(reduced[d] ? -1 : static_cast<int64_t>(d));
    if (reduced[d] && keepdim) degenerate.push_back(static_cast<int64_t>(d));
  }
  return RemapDims(ReplicateDims(g, degenerate), map, static_cast<int64_t>(reduced.size()));
}

std::vector<Strategy> SumBackwardRule(const OpCall& call) {
  const Shape& shape = call.attrs.GetInts("shape");
  const std::vector<char> reduced =
      ReducedMask(call.attrs.GetInts("dims"), static_cast<int64_t>(shape.size()), "sum_backward");
  const bool keepdim = call.attrs.GetBool("keepdim");
  TESSEL_CHECK(call.spec(0).shape() == ReducedShape(shape, reduced, keepdim), "sum_backward: grad shape ",
               ShapeStr(call.spec(0).shape()), " is not the reduction of ", ShapeStr(shape), "; call ",
               DescribeCall(call));
  std::vector<int64_t> degenerate;  // reduced dims kept as size 1: never sharded
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d] && keepdim) degenerate.push_back(static_cast<int64_t>(d));
  }
  const ShardingState g = ReplicateDims(KeepPartials(call.state(0), {ReduceOp::kSum, ReduceOp::kAvg}), degenerate);
  std::vector<Strategy> s = One({g}, {OutputSpec{BroadcastBack(g, reduced, keepdim), shape, {}}});
  s[0].local_attrs = LocalShapeAttr;
  return s;
}

std::vector<Strategy> MaxBackwardRule(const OpCall& call) {
  const Shape& shape = call.attrs.GetInts("shape");
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<char> reduced(static_cast<size_t>(nd), 0);
  if (nd > 0) reduced[static_cast<size_t>(NormalizeDim(call.attrs.GetInt("dim"), nd, "max_backward"))] = 1;
  const bool keepdim = call.attrs.GetBool("keepdim");
  std::vector<int64_t> degenerate;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d] && keepdim) degenerate.push_back(static_cast<int64_t>(d));
  }
  // The gradient may stay Partial(sum/avg) (linear); the indices are Replicate wherever it is Partial.
  const ShardingState g = ReplicateDims(KeepPartials(call.state(0), {ReduceOp::kSum, ReduceOp::kAvg}), degenerate);
  const ShardingState idx = PartialToReplicate(g);
  std::vector<Strategy> s = One({g, idx}, {OutputSpec{BroadcastBack(g, reduced, keepdim), shape, {}}});
  s[0].local_attrs = LocalShapeAttr;
  return s;
}

const bool kRegistered = [] {
  RegisterShardingRule("sum", SumRule);
  RegisterShardingRule("mean", MeanRule);
  RegisterShardingRule("amax", AmaxRule);
  RegisterShardingRule("max", MaxRule);
  RegisterShardingRule("norm", NormRule);
  RegisterShardingRule("sum_backward", SumBackwardRule);
  RegisterShardingRule("max_backward", MaxBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
