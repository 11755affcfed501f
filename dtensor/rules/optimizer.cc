// dtensor/rules/optimizer.cc — sharding rules for core/ops/optimizer.cc: adamw_step_(param, grad,
// exp_avg, exp_avg_sq), sgd_step_(param, grad, momentum_buffer?) and adamw_step_foreach_ (many
// adamw_step_ groups in one call, each ruled alone; the gradients that need an all_reduce share one).
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

// Sets s.inputs[p_index + k·stride] for one update group whose tensors sit at inputs p_index,
// p_index + stride, ... (`group` of them: param, grad, state...) and adds the parameter's output spec.
void AddGroup(const OpCall& call, int p_index, int stride, int group, Strategy& s) {
  const DTensorSpec& param = call.spec(p_index);
  const ShardingState p = call.state(p_index);
  TESSEL_CHECK(!HasPartial(p), call.op.name, ": the parameter",
               stride > 1 ? Str(" of group ", p_index, " (", ShapeStr(param.shape()), ")") : std::string(),
               " is Partial (", PlacementsToString(param.placements()),
               "); reduce it to Replicate or Shard before the update; call ", DescribeCall(call));
  s.inputs[static_cast<size_t>(p_index)] = p;
  for (int k = 1; k < group; ++k) {
    const int i = p_index + k * stride;
    if (!call.defined(i)) continue;
    TESSEL_CHECK(call.spec(i).shape() == param.shape(), call.op.name, ": input ", i, " has shape ",
                 ShapeStr(call.spec(i).shape()), " but the parameter has ", ShapeStr(param.shape()), "; call ",
                 DescribeCall(call));
    if (k >= 2) {
      TESSEL_CHECK(call.state(i) == p, call.op.name, ": optimizer state input ", i, " has placements ",
                   PlacementsToString(call.spec(i).placements()), " but the parameter has ",
                   PlacementsToString(param.placements()),
                   " (declared vs required); create the state with the parameter's layout; call ", DescribeCall(call));
    }
    s.inputs[static_cast<size_t>(i)] = p;
  }
  s.outputs.push_back(OutputSpec{p, param.shape(), param.strides()});
}

// adamw_step_ / sgd_step_: one group (param, grad, state...).
std::vector<Strategy> OptimizerRule(const OpCall& call) {
  Strategy s;
  s.inputs.resize(static_cast<size_t>(call.num_inputs()));
  AddGroup(call, 0, 1, call.num_inputs(), s);
  return {s};
}

// adamw_step_foreach_: params [0, n), grads [n, 2n), exp_avgs [2n, 3n), exp_avg_sqs [3n, 4n); each
// group is ruled as adamw_step_ rules its one group.
std::vector<Strategy> ForeachOptimizerRule(const OpCall& call) {
  TESSEL_CHECK(call.num_inputs() % 4 == 0, call.op.name, ": expected 4 x n inputs, got ", call.num_inputs());
  const int n = call.num_inputs() / 4;
  Strategy s;
  s.inputs.resize(static_cast<size_t>(call.num_inputs()));
  for (int g = 0; g < n; ++g) AddGroup(call, g, n, 4, s);
  s.coalesce_all_reduces = true;  // every Partial gradient of a replicated parameter in one all_reduce
  return {s};
}

const bool kRegistered = [] {
  RegisterShardingRule("adamw_step_", OptimizerRule);
  RegisterShardingRule("sgd_step_", OptimizerRule);
  RegisterShardingRule("adamw_step_foreach_", ForeachOptimizerRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
