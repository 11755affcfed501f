// dtensor/rules/ternary.cc — sharding rules for core/ops/ternary.cc: where, masked_fill, eq, lt, gt, maximum,
// minimum, addcmul, addcdiv, lerp, lerp_tensor and the in-place addcmul_, addcdiv_, lerp_, lerp_tensor_.
//
// Invariant: all operands (masks included) broadcast to one output and are treated as pointwise operands
// (rule_util.h Pointwise), so a condition or mask follows the data's sharding. Partial values pass
// where selection is linear: where(cond R, a, b) keeps any reduce op carried by both branches (a
// Replicate branch is partitioned); masked_fill keeps avg, max and min (the fill value is the same on
// every rank) and sum only when it fills zeros. Comparisons, maximum, minimum, addcmul, addcdiv and lerp are not
// linear in all their operands: Partial inputs are reduced (torch's pointwise strategy for them). The in-place forms
// write input 0's local shard and move only the other operands.
//
// Example:
//   Where(c_S0, a_S0, b_R);            // [S(0)] everywhere, b chunked locally
//   MaskedFill(g_Psum, mask_R, 0.0);   // [P(sum)] -> [P(sum)]
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

const bool kRegistered = [] {
  RegisterShardingRule("where", PointwiseRule<Linearity::kWhere>, kElementwise);
  RegisterShardingRule("masked_fill", PointwiseRule<Linearity::kMaskedFill>, kElementwise);
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
