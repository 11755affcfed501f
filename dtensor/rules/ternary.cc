// dtensor/rules/ternary.cc — sharding rules for core/ops/ternary.cc: where, masked_fill, eq, lt, gt, maximum,
// minimum, addcmul, addcdiv, lerp, lerp_tensor and the in-place addcmul_, addcdiv_, lerp_, lerp_tensor_.
//
// Invariant: all operands (masks included) broadcast to one output and are treated as pointwise operands
// (rule_util.h Pointwise), so a condition or mask follows the data's sharding. Partial inputs are reduced first,
// as torch 2.15's pointwise strategies for these ops list no Partial rule: where and masked_fill (though a
// selection of partial sums would be exact), comparisons, maximum, minimum, addcmul, addcdiv and lerp. The
// in-place forms write input 0's local shard and move only the other operands.
//
// Example:
//   Where(c_S0, a_S0, b_R);            // [S(0)] everywhere, b chunked locally
//   MaskedFill(g_Psum, mask_R, 0.0);   // [P(sum)] -> all_reduce -> [R]
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

const bool kRegistered = [] {
  RegisterShardingRule("where", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("masked_fill", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("eq", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("lt", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("gt", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("ne", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("le", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("ge", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("maximum", PointwiseRule<Linearity::kNone>, kElementwise);
  RegisterShardingRule("minimum", PointwiseRule<Linearity::kNone>, kElementwise);
  for (const char* name : {"addcmul", "addcdiv", "lerp", "lerp_tensor"}) {
    RegisterShardingRule(name, PointwiseRule<Linearity::kNone>, kElementwise);
  }
  for (const char* name : {"addcmul_", "addcdiv_", "lerp_", "lerp_tensor_"}) {
    RegisterShardingRule(name, PointwiseRule<Linearity::kNone>);
  }
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
