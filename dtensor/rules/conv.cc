// dtensor/rules/conv.cc — sharding rules for core/ops/conv.cc: convolution(x [N, C, *spatial],
// w [OC, C / groups, *kernel], bias? [OC]) -> [N, OC, *out], convolution_backward_input(g, w; shape) ->
// x's shape and convolution_backward_weight(x, g; shape) -> w's shape.
//
// Invariant: per mesh axis a convolution can
//   * replicate everything;
//   * shard the batch (PyTorch's convolution strategy: x S(0), weight and bias Replicate -> S(0));
//   * shard the output channels (groups 1; the column-parallel linear's layout): weight and bias S(0),
//     x Replicate -> output S(1).
// The backward products mirror them: backward_input takes a batch-sharded g to a batch-sharded
// gradient and contracts output-channel shards into P(sum); backward_weight contracts batch shards
// into P(sum) (data parallelism's gradient) and keeps output-channel shards as the weight's S(0).
// Their "shape" attr names the global shape; the local call gets this rank's (LocalShapeAttr). A
// spatially sharded input (a halo exchange would be needed) is gathered by the all-Replicate option.
//
// Example (data parallel):
//   Convolution(x_S0, w_R, b_R);   // [S(0)], no communication; the weight gradient comes back P(sum)
#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

using comm::ReduceOp;

std::vector<Strategy> ConvRule(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  const DTensorSpec& w = call.spec(1);
  TESSEL_CHECK(x.ndim() >= 3 && w.ndim() == x.ndim(), "convolution: expected input [N, C, *spatial] and weight ",
               "[OC, C / groups, *kernel] of the same rank; call ", DescribeCall(call));
  Shape out = {x.shape()[0], w.shape()[0]};
  for (int64_t d = 2; d < x.ndim(); ++d) {  // the local kernel validates; this only sizes the output
    const int64_t i = d - 2;
    const std::vector<int64_t>& st = call.attrs.GetInts("stride");
    const std::vector<int64_t>& dil = call.attrs.GetInts("dilation");
    const int64_t padded = x.shape()[d] + call.attrs.GetInts("padding")[i] + call.attrs.GetInts("padding_r")[i];
    out.push_back((padded - dil[i] * (w.shape()[d] - 1) - 1) / st[i] + 1);
  }
  std::vector<AxisOption> options = {{{Replicate{}, Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate},
                                     {{Shard{0}, Replicate{}, Replicate{}}, {Shard{0}}, StrategyKind::kShard}};
  if (call.attrs.GetInt("groups") == 1) {
    options.push_back({{Replicate{}, Shard{0}, Shard{0}}, {Shard{1}}, StrategyKind::kShard});
  }
  return CombineAxisOptions(call, options, {out});
}

std::vector<Strategy> ConvBackwardInputRule(const OpCall& call) {
  std::vector<AxisOption> options = {{{Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate},
                                     {{Shard{0}, Replicate{}}, {Shard{0}}, StrategyKind::kShard}};
  if (call.attrs.GetInt("groups") == 1) {
    options.push_back({{Shard{1}, Shard{0}}, {Partial{ReduceOp::kSum}}, StrategyKind::kContract});
  }
  std::vector<Strategy> out = CombineAxisOptions(call, options, {call.attrs.GetInts("shape")});
  for (Strategy& s : out) s.local_attrs = LocalShapeAttr;
  return out;
}

std::vector<Strategy> ConvBackwardWeightRule(const OpCall& call) {
  std::vector<AxisOption> options = {{{Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate},
                                     {{Shard{0}, Shard{0}}, {Partial{ReduceOp::kSum}}, StrategyKind::kContract}};
  if (call.attrs.GetInt("groups") == 1) {
    options.push_back({{Replicate{}, Shard{1}}, {Shard{0}}, StrategyKind::kShard});
  }
  std::vector<Strategy> out = CombineAxisOptions(call, options, {call.attrs.GetInts("shape")});
  for (Strategy& s : out) s.local_attrs = LocalShapeAttr;
  return out;
}

const bool kRegistered = [] {
  RegisterShardingRule("convolution", ConvRule);
  RegisterShardingRule("convolution_backward_input", ConvBackwardInputRule);
  RegisterShardingRule("convolution_backward_weight", ConvBackwardWeightRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
