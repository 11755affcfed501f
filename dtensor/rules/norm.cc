// dtensor/rules/norm.cc — sharding rules for core/ops/norm.cc: layer_norm(x, w?, b?) -> y, mean, rstd;
// rms_norm(x, w?) -> y, rstd; and layer_norm_backward / rms_norm_backward.
//
// Invariant: a row is normalized on one rank, so the normalized (last) dim is never sharded — an input
// sharded there is gathered first; every other dim keeps its sharding (sequence parallel: x [S(1)] ->
// y, stats [S(1)], no communication). Weights and biases are Replicate. x is never Partial (the
// statistics are not linear). In backward, grad_x follows x (and stays Partial(sum/avg) when the
// incoming gradient is Partial and x Replicate: the backward is linear in the gradient), while
// grad_weight / grad_bias are row sums: Partial(sum) on every axis that shards x's rows.
//
// Example (sequence parallel on "tp"):
//   LayerNorm(x_S1, w_R, b_R);            // y [S(1)], no communication
//   // backward: grad_w, grad_b [P(sum)] (the optimizer all-reduces them), grad_x [S(1)]
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

// x's layout for a norm: Partial reduced, the last dim whole.
ShardingState RowsLayout(const ShardingState& x, int64_t ndim) {
  return ReplicateDims(PartialToReplicate(x), {ndim - 1});
}

std::optional<ShardingState> ReplicatedIf(const OpCall& call, int i) {
  if (!call.defined(i)) return std::nullopt;
  return ReplicatedState(call.mesh_ndim(), call.spec(i).ndim());
}

// torch 2.15's layer_norm / _fused_rms_norm (layer_norm_single_dim_strategy, rms_norm_single_dim_strategy): per
// mesh axis everything Replicate, or x, the output and the statistics sharded on one leading dim (when some input
// is sharded) with the weight and bias Replicate; a Partial x is reduced, reduce-scattered where that is cheaper.
std::vector<Strategy> NormForwardRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  TESSEL_CHECK(x.ndim() >= 1, call.op.name, ": input must have at least 1 dim; call ", DescribeCall(call));
  const bool centered = call.op.name == "layer_norm";
  Shape stats = x.shape();
  stats.back() = 1;
  if (InputsInDefaultOrder(call)) {
    const size_t n = static_cast<size_t>(call.num_inputs()), outs = centered ? 3 : 2;
    std::vector<AxisOption> options{
        {std::vector<Placement>(n, Replicate{}), std::vector<Placement>(outs, Replicate{}), StrategyKind::kReplicate}};
    if (AnyInputSharded(call)) {
      for (int64_t d = 0; d + 1 < x.ndim(); ++d) {
        AxisOption o{std::vector<Placement>(n, Replicate{}), std::vector<Placement>(outs, Shard{d})};
        o.inputs[0] = Shard{d};
        options.push_back(std::move(o));
      }
    }
    std::vector<std::optional<Shape>> shapes{x.shape(), stats};
    if (centered) shapes.push_back(stats);
    return ExpandAxisOptions(call, options, shapes);
  }
  const ShardingState in = RowsLayout(call.state(0), x.ndim());
  Strategy s;
  s.inputs.push_back(in);
  for (int i = 1; i < call.num_inputs(); ++i) s.inputs.push_back(ReplicatedIf(call, i));
  s.outputs.push_back(OutputSpec{in, x.shape(), {}});
  if (centered) s.outputs.push_back(OutputSpec{in, stats, {}});
  s.outputs.push_back(OutputSpec{in, stats, {}});
  return {s};
}

// (grad, x, w?, [mean,] rstd) following `rows` (x's row layout) -> (grad_x, grad_w, [grad_b]).
Strategy NormBackward(const OpCall& call, const ShardingState& rows) {
  const bool centered = call.op.name == "layer_norm_backward";
  const DTensorSpec& x = call.spec(1);
  ShardingState grad = rows;
  const ShardingState g = call.state(0);
  std::vector<Placement> param(static_cast<size_t>(call.mesh_ndim()), Replicate{});
  for (int a = 0; a < call.mesh_ndim(); ++a) {
    const Placement& r = rows.placements[static_cast<size_t>(a)];
    const Partial* p = std::get_if<Partial>(&g.placements[static_cast<size_t>(a)]);
    if (IsShard(r)) param[static_cast<size_t>(a)] = Partial{comm::ReduceOp::kSum};
    if (p != nullptr && IsReplicate(r) &&
        (p->reduce_op == comm::ReduceOp::kSum || p->reduce_op == comm::ReduceOp::kAvg)) {
      grad = SetAxis(grad, a, *p);
      param[static_cast<size_t>(a)] = *p;
    }
  }
  Strategy s;
  s.inputs = {grad, rows, ReplicatedIf(call, 2), rows};
  if (centered) s.inputs.push_back(rows);
  const Shape c = {x.shape().back()};
  s.outputs.push_back(OutputSpec{grad, x.shape(), {}});
  s.outputs.push_back(OutputSpec{DefaultState(param, 1), c, {}});
  if (centered) s.outputs.push_back(OutputSpec{DefaultState(param, 1), c, {}});
  return s;
}

std::vector<Strategy> NormBackwardRule(const OpCall& call) {
  const int64_t nd = call.spec(1).ndim();
  const ShardingState follow_x = RowsLayout(call.state(1), nd);
  std::vector<Strategy> out = {NormBackward(call, follow_x)};
  const ShardingState follow_g = RowsLayout(call.state(0), nd);
  if (follow_g != follow_x) out.push_back(NormBackward(call, follow_g));
  return out;
}

const bool kRegistered = [] {
  RegisterShardingRule("layer_norm", NormForwardRule);
  RegisterShardingRule("rms_norm", NormForwardRule);
  RegisterShardingRule("layer_norm_backward", NormBackwardRule);
  RegisterShardingRule("rms_norm_backward", NormBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
