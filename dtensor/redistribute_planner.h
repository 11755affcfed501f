// dtensor/redistribute_planner.h — the pure redistribute planner: (src spec, dst spec) -> list of steps,
// each one single-axis transition of [Note: Placement semantics] (f) in placement.h. No communication,
// no tensor memory; the executor (redistribute.h) runs the steps, DryRun lists the collectives.
//
// Invariant: for every legal (src, dst) pair on any mesh, the plan
//   * ends in dst (replaying ApplyStep from plan.start gives plan.end, dst with size-1 axes normalized);
//   * issues exactly one collective per mesh axis of size > 1 that must communicate — an axis whose
//     Shard leaves its place in the shard order (all_gather or all_to_all) for anything but Partial(sum)
//     (embed_shard is local), or a Partial axis that becomes Replicate or Shard (all_reduce or
//     reduce_scatter) — and none otherwise, which is the minimum: data crosses that axis' groups and one
//     collective per axis suffices;
//   * is the same on every rank (it depends on the specs only, never on the coordinate), so all ranks
//     issue the same collectives in the same order.
// Nested sharding: only the last axis of a dim's shard order can leave it, so inner axes are gathered
// first (default order); a new Shard joins the end of the order. Size-1 axes are treated as Replicate
// (placement.h Note (c)). Choice among ready steps follows one ordered table (Priority in the .cc):
// local chunk, reduce_scatter, partition, all_reduce, all_to_all, all_gather, embed_shard; an all_to_all
// whose target dim is blocked by a cycle (e.g. [S(0), S(1)] -> [S(1), S(0)]) becomes all_gather + local
// chunk. A Shard axis whose target is Partial(sum) embeds its piece in zeros (no communication, as
// torch's Shard._to_partial_tensor); one going to Partial(avg / max / min) is gathered, then partitioned
// (torch refuses that pair).
//
// Example:
//   RedistributePlan p = PlanRedistribute(src, dst);     // src [S(0)] -> dst [R] on a 4-rank mesh
//   p.steps;                                             // {all_gather(axis 0, dim 0)}
//   DryRun(src, dst, {0});                               // {all_gather on "x", 4*3 floats...}
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/tracer.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/placement.h"
#include "dtensor/shard_order.h"

namespace tessel::dtensor {

enum class StepKind {
  kAllGather,      // S(src_dim) -> R           (axis last in src_dim's order)
  kAllReduce,      // P(op) -> R
  kReduceScatter,  // P(op) -> S(dst_dim)       (axis appended to dst_dim's order)
  kAllToAll,       // S(src_dim) -> S(dst_dim)  (leaves src_dim's order end, joins dst_dim's)
  kLocalChunk,     // R -> S(dst_dim), no communication
  kPartition,      // R -> P(op), no communication
  kEmbedShard,     // S(src_dim) -> P(sum), no communication: the piece in zeros of the dim's released extent
};
std::string_view StepKindName(StepKind kind);  // "all_gather", ..., "partition", "embed_shard"
// The collective a step issues; nullopt for local steps.
std::optional<comm::CollectiveKind> CollectiveOf(StepKind kind);

struct RedistributeStep {
  StepKind kind = StepKind::kAllGather;
  int axis = 0;
  int64_t src_dim = -1;  // all_gather, all_to_all, embed_shard
  int64_t dst_dim = -1;  // reduce_scatter, all_to_all, local_chunk
  comm::ReduceOp op = comm::ReduceOp::kSum;  // all_reduce, reduce_scatter, partition, embed_shard (sum)
  // "all_gather(axis=1, dim=0)", "all_to_all(axis=0, dim 0->1)", "reduce_scatter(axis=0, dim=1, sum)"
  std::string ToString() const;
  friend bool operator==(const RedistributeStep&, const RedistributeStep&) = default;
};
std::ostream& operator<<(std::ostream& os, const RedistributeStep& step);

// The part of a spec that steps change.
struct ShardingState {
  std::vector<Placement> placements;
  ShardOrder order;
  std::string ToString() const;  // "[S(0), R] {0: [0]}"
  friend bool operator==(const ShardingState&, const ShardingState&) = default;
};
ShardingState StateOf(const DTensorSpec& spec);
// REQUIRES: `step` is legal in `state` (true for every step of a plan, replayed in order).
ShardingState ApplyStep(const ShardingState& state, const RedistributeStep& step);

struct RedistributePlan {
  ShardingState start;  // src with size-1 axes normalized to Replicate; the executor replays from here
  ShardingState end;    // dst, normalized the same way
  std::vector<RedistributeStep> steps;
  int num_collectives() const;
  std::string ToString() const;  // "all_gather(axis=1, dim=0) -> local_chunk(axis=0, dim=1)" or "(no steps)"
};

// The planner proper, on placements only. REQUIRES: both states valid for `mesh_shape` and `ndim`
// (as DTensorSpec::Verify checks). Throws kInvalidArgument for P(op1) -> P(op2).
RedistributePlan PlanRedistribute(std::span<const int64_t> mesh_shape, int64_t ndim, const ShardingState& src,
                                  const ShardingState& dst);
// Spec form: also checks that mesh, global shape and dtype agree; errors name both specs.
RedistributePlan PlanRedistribute(const DTensorSpec& src, const DTensorSpec& dst);

// One collective of a plan as the comm tracer would record it on the rank at `coordinate`.
struct PlannedCollective {
  comm::CollectiveKind kind;
  int axis = 0;
  std::string group;  // the axis name (DeviceMesh names each axis group after its axis)
  int64_t bytes = 0;  // bytes this rank contributes (padded to the largest piece for gather/scatter)
  std::string ToString() const;  // "all_gather(tp, 48 B)"
};
std::vector<PlannedCollective> DryRun(const DTensorSpec& src, const DTensorSpec& dst,
                                      std::span<const int64_t> coordinate);

}  // namespace tessel::dtensor
