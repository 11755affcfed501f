// dtensor/rules/grouped_mm.cc — the sharding rule of "grouped_mm" (core/ops/grouped_mm.h): torch 2.15's
// grouped_mm_single_dim_strategy (torch/distributed/tensor/_ops/_matrix_ops.py), expanded over the mesh by
// ExpandAxisOptions. Per mesh axis, as [output, mat_a, mat_b]: everything Replicate; a Partial(sum) operand
// with the other Replicate gives a Partial(sum) output; and, when some input is sharded (torch fills its
// Shard placeholders only then), per layout:
//   2-D x 3-D  [S(1), R, S(2)] (experts' columns)        [P, S(1), S(1)] (the contraction)
//   3-D x 2-D  [P, S(2), S(0)] (the contraction)         [S(0), S(1), R] (rows)
//   2-D x 2-D  [S(2), R, S(1)] (columns)                 [S(1), S(0), R] (rows)
//   3-D x 3-D  [S(2), R, S(2)], [S(1), S(1), R], [P, S(2), S(1)], [S(0), S(0), S(0)] (the groups)
// The jagged dim (the one the offsets split) is never sharded: the offsets index it globally. torch filters
// candidates whose local pieces break its kernels' 16-byte stride alignment; tessel's kernel needs none.
//
// Example: a [T, K] Replicate by experts [E, K, N] Shard(2) on "tp" gives the tokens' outputs Shard(1), no
// communication (column-parallel experts).
#include <optional>
#include <vector>

#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"
#include "dtensor/sharding_rule.h"

namespace tessel::dtensor::rules {
namespace {

std::vector<Strategy> GroupedMmRule(const OpCall& call) {
  const DTensorSpec& a = call.spec(0);
  const DTensorSpec& b = call.spec(1);
  const int64_t an = a.ndim(), bn = b.ndim();
  TESSEL_CHECK((an == 2 || an == 3) && (bn == 2 || bn == 3), "grouped_mm: operands must be 2-D or 3-D; call ",
               DescribeCall(call));
  const int64_t groups = call.attrs.Has("ends") ? static_cast<int64_t>(call.attrs.GetInts("ends").size()) : 0;
  Shape out;
  if (an == 2 && bn == 3) out = {a.shape()[0], b.shape()[2]};
  if (an == 2 && bn == 2) out = {groups, a.shape()[0], b.shape()[1]};
  if (an == 3 && bn == 2) out = {a.shape()[1], b.shape()[1]};
  if (an == 3 && bn == 3) out = {a.shape()[0], a.shape()[1], b.shape()[2]};
  auto p = [](std::optional<int64_t> shard_dim) -> Placement {
    return shard_dim ? Placement(Shard{*shard_dim}) : Placement(Replicate{});
  };
  std::vector<AxisOption> options{
      {{Replicate{}, Replicate{}}, {Replicate{}}, StrategyKind::kReplicate},
      {{Partial{}, Replicate{}}, {Partial{}}, StrategyKind::kPartialLinear},
      {{Replicate{}, Partial{}}, {Partial{}}, StrategyKind::kPartialLinear},
  };
  if (AnyInputSharded(call)) {
    // {output, a, b}: a Shard dim or nullopt (Replicate; Partial(sum) for the output of a contraction)
    struct Row {
      std::optional<int64_t> out, a, b;
    };
    std::vector<Row> rows;
    if (an == 2 && bn == 3) rows = {{1, std::nullopt, 2}, {std::nullopt, 1, 1}};
    if (an == 3 && bn == 2) rows = {{std::nullopt, 2, 0}, {0, 1, std::nullopt}};
    if (an == 2 && bn == 2) rows = {{2, std::nullopt, 1}, {1, 0, std::nullopt}};
    if (an == 3 && bn == 3) rows = {{2, std::nullopt, 2}, {1, 1, std::nullopt}, {std::nullopt, 2, 1}, {0, 0, 0}};
    for (const Row& r : rows) {
      const bool contract = !r.out.has_value();
      options.push_back(AxisOption{{p(r.a), p(r.b)},
                                   {contract ? Placement(Partial{}) : p(r.out)},
                                   contract ? StrategyKind::kContract : StrategyKind::kShard});
    }
  }
  return ExpandAxisOptions(call, options, {out});
}

const bool kRegistered = RegisterShardingRule("grouped_mm", GroupedMmRule);

}  // namespace
}  // namespace tessel::dtensor::rules
