// dtensor/rules/strided_view.cc — sharding rules for core/ops/strided_view.cc: as_strided has none. Its
// sizes, strides and storage offset name positions in one tensor's memory, which a DTensor's global shape
// does not have (PyTorch's DTensor has no as_strided strategy either); core/ops' AsStrided already refuses a
// DTensor, and this rule says the same to a direct dispatch instead of gathering everything.
//
// Example:
//   AsStrided(dtensor, {2, 2}, {1, 2});  // kUnimplemented: "as_strided: a DTensor of shape ..."
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> AsStridedRule(const OpCall& call) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, false, "as_strided: a DTensor of shape ",
                    ShapeStr(call.spec(0).shape()), " has no strides in memory; call to_local() or full_tensor() first");
  return {};
}

const bool kRegistered = [] {
  RegisterShardingRule("as_strided", AsStridedRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
