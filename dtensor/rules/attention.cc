// dtensor/rules/attention.cc — sharding rules for core/ops/attention.cc: scaled_dot_product_attention(q,
// k, v) -> out, lse and scaled_dot_product_attention_backward(grad, q, k, v, out, lse) -> dq, dk, dv.
//
// Invariant: heads are independent, so any leading (batch / head) dim may be sharded on q, k, v alike
// and every output keeps it (tensor parallel attention: heads sharded on "tp", no communication). Query
// rows are independent too when there is no causal mask: q (and out, lse) may be sharded on the query
// dim T with k and v Replicate; in backward that makes dk and dv Partial(sum). Under is_causal the mask
// depends on absolute positions, so T stays whole. The key dim and head dim are never sharded
// (softmax over keys and the q·k contraction need them whole); Partial inputs are reduced first.
//
// Example:
//   ScaledDotProductAttention(q_S1, k_S1, v_S1);   // [B, H, T, D] heads on "tp": out, lse [S(1)]
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

struct Dims {
  int64_t lead = 0;  // number of leading (batch / head) dims
  Shape out;         // [..., T, Dv]
  Shape lse;         // [..., T]
};

Dims AttentionDims(const OpCall& call, int q, int k, int v) {
  const DTensorSpec& qs = call.spec(q);
  const DTensorSpec& ks = call.spec(k);
  const DTensorSpec& vs = call.spec(v);
  const int64_t nd = qs.ndim();
  TESSEL_CHECK(nd >= 2 && ks.ndim() == nd && vs.ndim() == nd &&
                   Shape(qs.shape().begin(), qs.shape().end() - 2) == Shape(ks.shape().begin(), ks.shape().end() - 2) &&
                   Shape(qs.shape().begin(), qs.shape().end() - 2) == Shape(vs.shape().begin(), vs.shape().end() - 2),
               call.op.name, ": q, k, v must have equal leading dims; call ", DescribeCall(call));
  Dims d;
  d.lead = nd - 2;
  d.out = qs.shape();
  d.out.back() = vs.shape().back();
  d.lse = Shape(qs.shape().begin(), qs.shape().end() - 1);
  return d;
}

std::vector<Strategy> AttentionRule(const OpCall& call) {
  const Dims d = AttentionDims(call, 0, 1, 2);
  const Shape& q = call.spec(0).shape();
  const Placement r = Replicate{};
  std::vector<AxisOption> options = {{{r, r, r}, {r, r}, StrategyKind::kReplicate}};
  for (int64_t i = 0; i < d.lead; ++i) {
    if (q[static_cast<size_t>(i)] > 1) options.push_back({{Shard{i}, Shard{i}, Shard{i}}, {Shard{i}, Shard{i}}});
  }
  if (!call.attrs.GetBool("is_causal") && q[static_cast<size_t>(d.lead)] > 1) {
    options.push_back({{Shard{d.lead}, r, r}, {Shard{d.lead}, Shard{d.lead}}});
  }
  return CombineAxisOptions(call, options, {d.out, d.lse});
}

std::vector<Strategy> AttentionBackwardRule(const OpCall& call) {
  const Dims d = AttentionDims(call, 1, 2, 3);
  const Shape& q = call.spec(1).shape();
  const Placement r = Replicate{};
  std::vector<AxisOption> options = {{{r, r, r, r, r, r}, {r, r, r}, StrategyKind::kReplicate}};
  for (int64_t i = 0; i < d.lead; ++i) {
    const Placement s = Shard{i};
    if (q[static_cast<size_t>(i)] > 1) options.push_back({{s, s, s, s, s, s}, {s, s, s}});
  }
  if (!call.attrs.GetBool("is_causal") && q[static_cast<size_t>(d.lead)] > 1) {
    const Placement t = Shard{d.lead}, p = Partial{comm::ReduceOp::kSum};
    options.push_back({{t, t, r, r, t, t}, {t, p, p}, StrategyKind::kContract});
  }
  return CombineAxisOptions(call, options, {call.spec(1).shape(), call.spec(2).shape(), call.spec(3).shape()});
}

const bool kRegistered = [] {
  RegisterShardingRule("scaled_dot_product_attention", AttentionRule);
  RegisterShardingRule("scaled_dot_product_attention_backward", AttentionBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
