// dtensor/rules/optimizer.cc — sharding rules for core/ops/optimizer.cc: adamw_step_(param, grad,
// exp_avg, exp_avg_sq) and sgd_step_(param, grad, momentum_buffer?).
//
// Invariant: the update is pointwise, so every rank updates its own shard in place — the parameter
// never moves. The optimizer state must have exactly the parameter's layout (it was created from it;
// anything else is a bug the caller must see): otherwise kInvalidArgument naming op, shapes,
// placements, mesh and rank. The gradient is a value whose layout is an autograd by-product (PyTorch
// leaves it as the backward produced it), so it is redistributed to the parameter's layout here: a
// Partial(sum) gradient of a replicated parameter is all-reduced (DDP), of a sharded one
// reduce-scattered, a Replicate gradient of a sharded parameter chunked locally. The tracer shows it.
// A Partial parameter is rejected (an update of a partial sum is not the update of the sum).
//
// Example:
//   AdamWStepInPlace(w_S0, g_S0, m_S0, v_S0, h);   // no communication
//   SgdStepInPlace(b_R, g_Psum, Tensor(), ...);     // one all_reduce of the gradient
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> OptimizerRule(const OpCall& call) {
  const DTensorSpec& param = call.spec(0);
  const ShardingState p = call.state(0);
  TESSEL_CHECK(!HasPartial(p), call.op.name, ": the parameter is Partial (", PlacementsToString(param.placements()),
               "); reduce it to Replicate or Shard before the update; call ", DescribeCall(call));
  Strategy s;
  s.inputs.push_back(p);
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) {
      s.inputs.emplace_back();
      continue;
    }
    TESSEL_CHECK(call.spec(i).shape() == param.shape(), call.op.name, ": input ", i, " has shape ",
                 ShapeStr(call.spec(i).shape()), " but the parameter has ", ShapeStr(param.shape()), "; call ",
                 DescribeCall(call));
    if (i >= 2) {
      TESSEL_CHECK(call.state(i) == p, call.op.name, ": optimizer state input ", i, " has placements ",
                   PlacementsToString(call.spec(i).placements()), " but the parameter has ",
                   PlacementsToString(param.placements()),
                   " (declared vs required); create the state with the parameter's layout; call ", DescribeCall(call));
    }
    s.inputs.push_back(p);
  }
  s.outputs.push_back(OutputSpec{p, param.shape(), param.strides()});
  return {s};
}

const bool kRegistered = [] {
  RegisterShardingRule("adamw_step_", OptimizerRule);
  RegisterShardingRule("sgd_step_", OptimizerRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
