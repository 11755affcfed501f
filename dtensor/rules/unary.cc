// dtensor/rules/unary.cc — sharding rules for core/ops/unary.cc: neg, exp, log, sqrt, rsqrt, pow, tanh,
// sigmoid, relu, gelu, silu, abs, clamp, cast and the fused backward ops tanh_backward,
// sigmoid_backward, threshold_backward, gelu_backward, silu_backward, abs_backward, clamp_backward; and
// core/ops/dropout.cc's dropout.
//
// Invariant: every op here is elementwise, so Shard and Replicate pass through unchanged (no
// communication). Partial passes only where the op preserves it (PyTorch's _pointwise_ops.py tables):
// neg is linear (sum, avg) and swaps max <-> min; ops non-decreasing on their whole domain (exp, tanh,
// sigmoid, relu, clamp) keep max and min; float casts keep all four; the *_backward ops are linear in
// the incoming gradient (input 0) when the saved tensor is Replicate. Everything else all-reduces a
// Partial input first. dropout is linear in x for a fixed mask (sum, avg pass), and each rank's kernel
// draws its own block of the FULL tensor's mask: its attrs get the global shape and this rank's offset
// (no communication; Replicate and Partial ranks draw the same whole mask).
//
// Example:
//   Gelu(x_S1);           // [S(1)] -> [S(1)], no communication
//   Exp(p_Psum);          // all_reduce, then exp: [R]
//   Relu(m_Pmax);         // [P(max)] -> [P(max)]
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

Attrs DropoutBlockAttrs(const LocalContext& ctx) {
  Attrs a = ctx.call.attrs;
  a.Set("full_shape", ctx.call.spec(0).shape());
  a.Set("block_offset", ctx.OutputOffset(0));
  return a;
}
std::vector<Strategy> DropoutRule(const OpCall& call) {
  std::vector<Strategy> s = Pointwise(call, Linearity::kUnaryLinear);
  for (Strategy& st : s) st.local_attrs = DropoutBlockAttrs;
  return s;
}

const bool kRegistered = [] {
  RegisterShardingRule("neg", PointwiseRule<Linearity::kNeg>, kElementwise);
  RegisterShardingRule("exp", PointwiseRule<Linearity::kMonotone>, kElementwise);
  RegisterShardingRule("log", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("sqrt", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("rsqrt", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("pow", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("tanh", PointwiseRule<Linearity::kMonotone>, kElementwise);
  RegisterShardingRule("sigmoid", PointwiseRule<Linearity::kMonotone>, kElementwise);
  RegisterShardingRule("relu", PointwiseRule<Linearity::kMonotone>, kElementwise);
  RegisterShardingRule("gelu", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("silu", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("abs", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("clamp", PointwiseRule<Linearity::kMonotone>, kElementwise);
  RegisterShardingRule("cast", PointwiseRule<Linearity::kCast>, kElementwise);
  RegisterShardingRule("sin", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("cos", PointwiseRule<Linearity::kNone>, kElementwise);
  for (const char* op : {"erf", "log1p", "expm1", "exp2", "floor", "ceil", "round"}) {
    RegisterShardingRule(op, PointwiseRule<Linearity::kMonotone>, kElementwise);  // non-decreasing
  }
  for (const char* op : {"tanh_backward", "sigmoid_backward", "threshold_backward", "gelu_backward", "silu_backward",
                         "abs_backward", "clamp_backward"}) {
    RegisterShardingRule(op, PointwiseRule<Linearity::kGradLinear>, kElementwise);
  }
  // Not kElementwise: that fast path would run the kernel with the call's attrs (every rank the
  // origin's mask).
  RegisterShardingRule("dropout", DropoutRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
