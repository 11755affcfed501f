// dtensor/rules/elementwise.cc — sharding rules for core/ops/elementwise.cc: add, sub, mul, div (numpy
// broadcasting), add_scalar, mul_scalar, add_, mul_, add_scalar_, mul_tensor_, div_tensor_, div_scalar_, clone,
// ones_like, zeros_like, sum_to_size.
//
// Invariant: binary ops follow an operand's layout (rule_util.h Pointwise); Partial operands keep their
// Partial exactly where the op is linear in them (add/sub: P+P; mul: P*R; div: P/R). add_ and mul_
// write input 0's local shard and never move it. clone keeps every placement, Partial included;
// ones_like / zeros_like keep Shard and Replicate and turn Partial into Replicate (a tensor of ones is
// not a partial sum of ones). sum_to_size sums the broadcast dims away: a sharded summed dim becomes
// Partial(sum), and its "shape" attr is rewritten to this rank's local shape.
//
// Example:
//   Add(x_S0, b_R);         // [S(0)] + [R] -> [S(0)], no communication
//   Add(p_Psum, r_R);       // [P(sum)] + [R] -> [P(sum)]: r is partitioned locally, no communication
//   Mul(p_Psum, q_Psum);    // one operand is all-reduced first
#include <algorithm>

#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

// ones_like / zeros_like: the input is read for its shape only; output in its layout, Partial -> R.
std::vector<Strategy> LikeRule(const OpCall& call) {
  const ShardingState in = call.state(0);
  return One({in}, {OutputSpec{PartialToReplicate(in), call.spec(0).shape(), {}}});
}

// sum_to_size(x; shape): sums x's leading dims and the dims where `shape` has 1 but x does not.
std::vector<Strategy> SumToSizeRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  const std::vector<int64_t>& shape = call.attrs.GetInts("shape");
  TESSEL_CHECK(BroadcastShapes(shape, x.shape(), "sum_to_size") == x.shape(), "sum_to_size: shape ", ShapeStr(shape),
               " does not broadcast to ", ShapeStr(x.shape()), "; call ", DescribeCall(call));
  const int64_t lead = x.ndim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dim_map(static_cast<size_t>(x.ndim()), -1);
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    const bool kept = d >= lead && shape[static_cast<size_t>(d - lead)] == x.shape()[static_cast<size_t>(d)];
    if (kept) dim_map[static_cast<size_t>(d)] = d - lead;
    if (!kept) summed.push_back(d);
  }
  ShardingState in = call.state(0);
  // Linear: P(sum) and P(avg) pass through; a sum is not max-linear.
  for (int a = 0; a < call.mesh_ndim(); ++a) {
    const Partial* p = std::get_if<Partial>(&in.placements[static_cast<size_t>(a)]);
    if (p != nullptr && p->reduce_op != comm::ReduceOp::kSum && p->reduce_op != comm::ReduceOp::kAvg) {
      in = SetAxis(in, a, Replicate{});
    }
  }
  ShardingState out = RemapDims(in, dim_map, static_cast<int64_t>(shape.size()), Partial{comm::ReduceOp::kSum});
  std::vector<Strategy> s = One({in}, {OutputSpec{std::move(out), Shape(shape.begin(), shape.end()), {}}});
  s[0].local_attrs = LocalShapeAttr;
  return s;
}

const bool kRegistered = [] {
  RegisterShardingRule("add", PointwiseRule<Linearity::kAdditive>, kElementwise);
  RegisterShardingRule("sub", PointwiseRule<Linearity::kAdditive>, kElementwise);
  RegisterShardingRule("mul", PointwiseRule<Linearity::kMul>, kElementwise);
  RegisterShardingRule("div", PointwiseRule<Linearity::kDiv>, kElementwise);
  RegisterShardingRule("add_scalar", PointwiseRule<Linearity::kAffine>, kElementwise);
  RegisterShardingRule("mul_scalar", PointwiseRule<Linearity::kUnaryLinear>, kElementwise);
  RegisterShardingRule("add_", PointwiseRule<Linearity::kAdditive>);
  RegisterShardingRule("mul_", PointwiseRule<Linearity::kUnaryLinear>);
  RegisterShardingRule("add_scalar_", PointwiseRule<Linearity::kAffine>);
  RegisterShardingRule("mul_tensor_", PointwiseRule<Linearity::kMul>);
  RegisterShardingRule("div_tensor_", PointwiseRule<Linearity::kDiv>);
  RegisterShardingRule("div_scalar_", PointwiseRule<Linearity::kUnaryLinear>);
  RegisterShardingRule("clone", PointwiseRule<Linearity::kAllPartial>, kElementwise);
  RegisterShardingRule("ones_like", LikeRule, kElementwise);
  RegisterShardingRule("zeros_like", LikeRule, kElementwise);
  RegisterShardingRule("sum_to_size", SumToSizeRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
