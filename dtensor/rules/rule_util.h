// dtensor/rules/rule_util.h — machinery shared by the rule files: the pointwise strategy generator with
// its Partial-linearity tables, and local-attr rewriters for attrs that carry global shapes.
//
// Invariant: on a 1-D mesh, and for in-place ops or inputs in a non-default shard order, Pointwise() returns one
// candidate per distinct layout it can follow (each input's current placements mapped through numpy
// broadcasting), so an op whose inputs already agree needs no communication; a Partial input keeps its Partial
// only where the op's linearity table has a row for it (PyTorch's _pointwise_ops.py rules, plus exact partition
// of Replicate inputs into Partial(sum)); else it is reduced: reduce-scattered onto the lowest dim no mesh axis
// to its right shards when some operand is sharded (torch's single-dim expansion offers Shard options only
// then), all-reduced otherwise. On a mesh of several dims it is torch 2.15's single-dim expansion itself
// (ExpandAxisOptions over all-Replicate, a Shard of each output dim, the linearity rows), so each mesh dim may
// follow a different operand.
//
// Example (dtensor/rules/elementwise.cc):
//   std::vector<Strategy> AddRule(const OpCall& call) { return Pointwise(call, Linearity::kAdditive); }
#pragma once

#include <string_view>
#include <vector>

#include "dtensor/sharding_rule.h"

namespace tessel::dtensor::rules {

// Which Partial layouts an elementwise op preserves. Rows are listed in rule_util.cc as strings, output
// first then one char per input: S = Partial(sum), A = Partial(avg), X = Partial(max), N = Partial(min),
// R = Replicate.
enum class Linearity {
  kNone,         // P -> R before the op (exp of a partial sum is not a partial of anything)
  kUnaryLinear,  // f(a + b) = f(a) + f(b): sum, avg                      (mul_scalar)
  kNeg,          // linear and order-reversing: sum, avg, max <-> min    (neg)
  kMonotone,     // non-decreasing on the whole domain: max, min         (relu, exp, tanh, sigmoid, clamp)
  kAffine,       // x + c: avg, max, min                                 (add_scalar)
  kCast,         // float -> float casts: sum, avg (approximately linear), max, min
  kAdditive,     // a + b, a - b                                         (add, sub, add_)
  kMul,          // partial through either factor, the other Replicate   (mul)
  kDiv,          // partial through the numerator only                   (div)
  kGradLinear,   // linear in input 0 (the incoming gradient), others R  (*_backward pointwise ops)
  kAllPartial,   // identity-like: every Partial op passes              (clone, contiguous)
  kCopy,         // copy_(dst, src): src takes dst's layout, any Partial op
};

// Candidates for an elementwise op whose defined inputs broadcast to one output (all inputs are
// operands). For in-place ops (call.op.is_inplace) only input 0's layout is followed.
std::vector<Strategy> Pointwise(const OpCall& call, Linearity lin);
// Pointwise as a rule function for RegisterShardingRule, with the traits of elementwise ops:
//   RegisterShardingRule("neg", PointwiseRule<Linearity::kNeg>, kElementwise);
template <Linearity kLin>
std::vector<Strategy> PointwiseRule(const OpCall& call) {
  return Pointwise(call, kLin);
}
inline constexpr RuleTraits kElementwise{.elementwise = true};

// The broadcast global shape of every defined input; kInvalidArgument naming the op otherwise.
Shape BroadcastInputShapes(const OpCall& call);

// A single-strategy answer with the given layouts.
std::vector<Strategy> One(std::vector<std::optional<ShardingState>> inputs,
                          std::vector<std::optional<OutputSpec>> outputs, StrategyKind kind = StrategyKind::kFollow);

// One choice on one mesh axis for an op with a fixed set of per-axis options (embedding, attention,
// loss): a placement per input and per output.
struct AxisOption {
  std::vector<Placement> inputs;
  std::vector<Placement> outputs;
  StrategyKind kind = StrategyKind::kShard;
};
// Every combination of per-axis options, each axis pruned to the options some input already matches
// (a non-Replicate placement equal to its current one) plus options[0], which must be the
// all-Replicate fallback. Default shard orders. A combination's kind is its most significant option's
// (masked > contract > partial > shard > replicate). `out_shapes[i]` nullopt: output i is undefined.
std::vector<Strategy> CombineAxisOptions(const OpCall& call, const std::vector<AxisOption>& options,
                                         const std::vector<std::optional<Shape>>& out_shapes);

// PyTorch 2.15's expansion of single-mesh-dim strategies (torch/distributed/tensor/_ops/single_dim_strategy.py)
// for ops ported from its register_single_dim_strategy rules: every combination of `options` (options[0] the
// all-Replicate one) in torch's order, the last mesh axis varying fastest. Dropped, as torch's cost model or
// expand_to_full_mesh_op_strategy drops them: an option on an axis where it would turn an input's Shard (or a
// Partial of another op) into a Partial (an infinite cost); a combination mixing Partial ops in one spec (sum
// with avg excepted); one that would split some input dim over more ranks than its size, unless it is the
// input's current layout. Ties go to the earlier candidate (Strategy::torch_ties), as torch's min-cost
// selection. A rule lists its Shard options only when AnyInputSharded, as torch fills its placeholders.
// Whether some defined input has a Shard on some mesh axis: torch 2.15 offers a single-dim strategy's Shard
// options (fills its placeholders) only then.
bool AnyInputSharded(const OpCall& call);
// Whether every defined input is in its default shard order. Rules that expand torch's single-dim strategies
// (default-order candidates) keep their per-input candidates otherwise: an order FSDP over tensor parallelism
// leaves ([S(0), S(0)] with tp first) would be moved back to the default one.
bool InputsInDefaultOrder(const OpCall& call);
std::vector<Strategy> ExpandAxisOptions(const OpCall& call, const std::vector<AxisOption>& options,
                                        const std::vector<std::optional<Shape>>& out_shapes);

// torch 2.15's _shard_except_dim_strategy (softmax-like, scan and sort-like ops), expanded as ExpandAxisOptions:
// every input and output takes one placement per mesh dim, Replicate, a Shard of any dim but `dim` (offered when
// some input is sharded), or Partial(op) for each op of `partials` (the op is linear in them). All defined
// inputs have the outputs' rank.
std::vector<Strategy> ShardExceptDim(const OpCall& call, int64_t dim,
                                     const std::vector<std::optional<Shape>>& out_shapes,
                                     const std::vector<comm::ReduceOp>& partials = {});

// Local-attr rewriters: the call's attrs with one global-shape attr replaced by output 0's local shape.
Attrs LocalShapeAttr(const LocalContext& ctx);       // "shape"
Attrs LocalInputShapeAttr(const LocalContext& ctx);  // "input_shape" (the *_backward view ops)

// Normalized dims of a reduction's "dims" attr (empty = all dims), as a per-dim mask.
std::vector<char> ReducedMask(const std::vector<int64_t>& dims, int64_t ndim, const char* op);

}  // namespace tessel::dtensor::rules
