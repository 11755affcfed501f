// dtensor/redistribute_planner.cc — the planner: legality check, size-1 normalization, and a schedule
// loop that takes the highest-priority ready single-axis step until the state equals the target.
#include "dtensor/redistribute_planner.h"

#include <algorithm>

#include "core/base/error.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {
namespace {

// [The transition table] Priority among steps that are ready at the same time, lowest first: shrink the
// data (local chunk, reduce_scatter) before moving it, reduce while it is small, move it (all_to_all)
// before growing it (all_gather), and embed a piece in zeros (which grows it without moving it) last,
// so that the other axes' collectives move only the piece. kSplitAllToAll is the deadlock breaker: an
// all_to_all whose target dim is not ready becomes an all_gather now (and a local chunk later) only when
// nothing else can run. Ties go to the lowest mesh axis. This is the only place where the choice among
// candidates is made.
enum Priority { kChunk, kReduceScatter, kPartition, kAllReduce, kAllToAll, kAllGather, kEmbed, kSplitAllToAll };

size_t CommonPrefix(const std::vector<int>& a, const std::vector<int>& b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return k;
}

// Axis `axis` can join the end of dim `dim`'s order now: the current order is a prefix of the target
// one and `axis` is the target's next entry.
bool AcquireReady(const ShardingState& cur, const ShardingState& end, int axis, int64_t dim) {
  const std::vector<int>& c = cur.order[static_cast<size_t>(dim)];
  const std::vector<int>& e = end.order[static_cast<size_t>(dim)];
  return c.size() < e.size() && CommonPrefix(c, e) == c.size() && e[c.size()] == axis;
}

struct Candidate {
  RedistributeStep step;
  Priority priority;
};

std::optional<Candidate> ShardCandidate(const ShardingState& cur, const ShardingState& end, int axis, int64_t dim) {
  const std::vector<int>& c = cur.order[static_cast<size_t>(dim)];
  const size_t pos = static_cast<size_t>(std::find(c.begin(), c.end(), axis) - c.begin());
  if (pos < CommonPrefix(c, end.order[static_cast<size_t>(dim)])) return std::nullopt;  // settled
  if (c.back() != axis) return std::nullopt;  // an inner axis of this dim must leave first
  const Placement& t = end.placements[static_cast<size_t>(axis)];
  const Shard* ts = std::get_if<Shard>(&t);
  if (ts != nullptr && ts->dim != dim) {
    if (AcquireReady(cur, end, axis, ts->dim)) {
      return Candidate{{StepKind::kAllToAll, axis, dim, ts->dim}, kAllToAll};
    }
    return Candidate{{StepKind::kAllGather, axis, dim}, kSplitAllToAll};
  }
  const Partial* tp = std::get_if<Partial>(&t);
  if (tp != nullptr && tp->reduce_op == comm::ReduceOp::kSum) {
    return Candidate{{StepKind::kEmbedShard, axis, dim, -1, comm::ReduceOp::kSum}, kEmbed};
  }
  return Candidate{{StepKind::kAllGather, axis, dim}, kAllGather};  // to R, to P(op), or to another position
}

std::optional<Candidate> CandidateFor(const ShardingState& cur, const ShardingState& end, int axis) {
  const Placement& c = cur.placements[static_cast<size_t>(axis)];
  const Placement& t = end.placements[static_cast<size_t>(axis)];
  if (const Shard* cs = std::get_if<Shard>(&c)) return ShardCandidate(cur, end, axis, cs->dim);
  const Shard* ts = std::get_if<Shard>(&t);
  if (IsReplicate(c)) {
    if (ts != nullptr) {
      if (!AcquireReady(cur, end, axis, ts->dim)) return std::nullopt;
      return Candidate{{StepKind::kLocalChunk, axis, -1, ts->dim}, kChunk};
    }
    if (const Partial* tp = std::get_if<Partial>(&t)) {
      return Candidate{{StepKind::kPartition, axis, -1, -1, tp->reduce_op}, kPartition};
    }
    return std::nullopt;
  }
  const Partial& cp = std::get<Partial>(c);
  if (IsReplicate(t)) return Candidate{{StepKind::kAllReduce, axis, -1, -1, cp.reduce_op}, kAllReduce};
  if (ts != nullptr) {
    if (!AcquireReady(cur, end, axis, ts->dim)) return std::nullopt;
    return Candidate{{StepKind::kReduceScatter, axis, -1, ts->dim, cp.reduce_op}, kReduceScatter};
  }
  return std::nullopt;  // same Partial (P(op1) -> P(op2) was rejected before planning)
}

// Size-1 axes hold the whole value whatever their placement: plan them as Replicate.
ShardingState Normalize(const ShardingState& s, std::span<const int64_t> mesh_shape) {
  ShardingState out = s;
  for (size_t a = 0; a < mesh_shape.size(); ++a) {
    if (mesh_shape[a] != 1) continue;
    out.placements[a] = Replicate{};
    for (std::vector<int>& axes : out.order) std::erase(axes, static_cast<int>(a));
  }
  return out;
}

template <typename Describe>
void CheckLegal(const ShardingState& src, const ShardingState& dst, const Describe& describe) {
  for (size_t a = 0; a < dst.placements.size(); ++a) {
    const Partial* tp = std::get_if<Partial>(&dst.placements[a]);
    if (tp == nullptr) continue;
    const Partial* sp = std::get_if<Partial>(&src.placements[a]);
    TESSEL_CHECK(sp == nullptr || sp->reduce_op == tp->reduce_op, "redistribute: ", sp ? sp->ToString() : "",
                 " -> ", tp->ToString(), " on mesh axis ", a,
                 " is not supported (a pending reduction cannot change its op; redistribute to Replicate first): ",
                 describe());
  }
}

RedistributePlan PlanChecked(std::span<const int64_t> mesh_shape, const ShardingState& src,
                             const ShardingState& dst) {
  RedistributePlan plan{Normalize(src, mesh_shape), Normalize(dst, mesh_shape), {}};
  ShardingState cur = plan.start;
  const size_t max_steps = 2 * mesh_shape.size() + 2;
  while (!(cur == plan.end)) {
    std::optional<Candidate> best;
    for (int a = 0; a < static_cast<int>(mesh_shape.size()); ++a) {
      std::optional<Candidate> c = CandidateFor(cur, plan.end, a);
      if (c && (!best || c->priority < best->priority)) best = c;
    }
    TESSEL_INTERNAL_ASSERT(best.has_value() && plan.steps.size() < max_steps, "redistribute planner stuck at ",
                           cur.ToString(), " going from ", plan.start.ToString(), " to ", plan.end.ToString());
    plan.steps.push_back(best->step);
    cur = ApplyStep(cur, best->step);
  }
  return plan;
}

}  // namespace

std::string_view StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather: return "all_gather";
    case StepKind::kAllReduce: return "all_reduce";
    case StepKind::kReduceScatter: return "reduce_scatter";
    case StepKind::kAllToAll: return "all_to_all";
    case StepKind::kLocalChunk: return "local_chunk";
    case StepKind::kPartition: return "partition";
    case StepKind::kEmbedShard: return "embed_shard";
  }
  return "unknown";
}

std::optional<comm::CollectiveKind> CollectiveOf(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather: return comm::CollectiveKind::kAllGather;
    case StepKind::kAllReduce: return comm::CollectiveKind::kAllReduce;
    case StepKind::kReduceScatter: return comm::CollectiveKind::kReduceScatter;
    case StepKind::kAllToAll: return comm::CollectiveKind::kAllToAll;
    case StepKind::kLocalChunk:
    case StepKind::kPartition:
    case StepKind::kEmbedShard: return std::nullopt;
  }
  return std::nullopt;
}

std::string RedistributeStep::ToString() const {
  std::string s = Str(StepKindName(kind), "(axis=", axis);
  switch (kind) {
    case StepKind::kAllGather: return s + Str(", dim=", src_dim, ")");
    case StepKind::kAllReduce: return s + Str(", ", comm::ReduceOpName(op), ")");
    case StepKind::kReduceScatter: return s + Str(", dim=", dst_dim, ", ", comm::ReduceOpName(op), ")");
    case StepKind::kAllToAll: return s + Str(", dim ", src_dim, "->", dst_dim, ")");
    case StepKind::kLocalChunk: return s + Str(", dim=", dst_dim, ")");
    case StepKind::kPartition: return s + Str(", ", comm::ReduceOpName(op), ")");
    case StepKind::kEmbedShard: return s + Str(", dim=", src_dim, ")");
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const RedistributeStep& step) { return os << step.ToString(); }

std::string ShardingState::ToString() const {
  return PlacementsToString(placements) + " " + ShardOrderToString(order);
}

ShardingState StateOf(const DTensorSpec& spec) { return {spec.placements(), spec.shard_order()}; }

ShardingState ApplyStep(const ShardingState& state, const RedistributeStep& step) {
  ShardingState s = state;
  Placement& p = s.placements[static_cast<size_t>(step.axis)];
  auto leave = [&](int64_t dim) {
    std::vector<int>& axes = s.order[static_cast<size_t>(dim)];
    TESSEL_INTERNAL_ASSERT(IsShardOn(p, dim) && !axes.empty() && axes.back() == step.axis, step.ToString(),
                           " is not legal in ", state.ToString());
    axes.pop_back();
  };
  auto join = [&](int64_t dim) {
    s.order[static_cast<size_t>(dim)].push_back(step.axis);
    p = Shard{dim};
  };
  switch (step.kind) {
    case StepKind::kAllGather:
      leave(step.src_dim);
      p = Replicate{};
      break;
    case StepKind::kAllToAll:
      leave(step.src_dim);
      join(step.dst_dim);
      break;
    case StepKind::kAllReduce:
      TESSEL_INTERNAL_ASSERT(IsPartial(p), step.ToString(), " is not legal in ", state.ToString());
      p = Replicate{};
      break;
    case StepKind::kReduceScatter:
      TESSEL_INTERNAL_ASSERT(IsPartial(p), step.ToString(), " is not legal in ", state.ToString());
      join(step.dst_dim);
      break;
    case StepKind::kLocalChunk:
      TESSEL_INTERNAL_ASSERT(IsReplicate(p), step.ToString(), " is not legal in ", state.ToString());
      join(step.dst_dim);
      break;
    case StepKind::kPartition:
      TESSEL_INTERNAL_ASSERT(IsReplicate(p), step.ToString(), " is not legal in ", state.ToString());
      p = Partial{step.op};
      break;
    case StepKind::kEmbedShard:
      leave(step.src_dim);
      p = Partial{comm::ReduceOp::kSum};
      break;
  }
  return s;
}

int RedistributePlan::num_collectives() const {
  return static_cast<int>(std::count_if(steps.begin(), steps.end(),
                                        [](const RedistributeStep& s) { return CollectiveOf(s.kind).has_value(); }));
}

std::string RedistributePlan::ToString() const {
  if (steps.empty()) return "(no steps)";
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? " -> " : "") + steps[i].ToString();
  return s;
}

RedistributePlan PlanRedistribute(std::span<const int64_t> mesh_shape, int64_t ndim, const ShardingState& src,
                                  const ShardingState& dst) {
  TESSEL_INTERNAL_ASSERT(src.placements.size() == mesh_shape.size() && dst.placements.size() == mesh_shape.size() &&
                             static_cast<int64_t>(src.order.size()) == ndim &&
                             static_cast<int64_t>(dst.order.size()) == ndim,
                         "PlanRedistribute: ", src.ToString(), " -> ", dst.ToString(), " on mesh ",
                         ShapeStr(mesh_shape), " for ndim ", ndim);
  CheckLegal(src, dst, [&] {
    return Str(src.ToString(), " -> ", dst.ToString(), " on mesh shape ", ShapeStr(mesh_shape));
  });
  return PlanChecked(mesh_shape, src, dst);
}

RedistributePlan PlanRedistribute(const DTensorSpec& src, const DTensorSpec& dst) {
  auto describe = [&] { return Str("from ", src.ToString(), " to ", dst.ToString()); };
  TESSEL_CHECK(src.mesh_ptr() == dst.mesh_ptr() || src.mesh() == dst.mesh(),
               "redistribute: the meshes differ (redistributing across meshes is not supported): ", describe());
  TESSEL_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(),
               "redistribute: global shape and dtype must not change: ", describe());
  const ShardingState s = StateOf(src), d = StateOf(dst);
  CheckLegal(s, d, describe);
  return PlanChecked(src.mesh().shape(), s, d);
}

std::string PlannedCollective::ToString() const {
  return Str(comm::CollectiveKindName(kind), "(", group, ", ", bytes, " B)");
}

std::vector<PlannedCollective> DryRun(const DTensorSpec& src, const DTensorSpec& dst,
                                      std::span<const int64_t> coordinate) {
  const RedistributePlan plan = PlanRedistribute(src, dst);
  const MeshTopology& mesh = src.mesh();
  const int64_t elem = ElementSize(src.dtype());
  std::vector<PlannedCollective> out;
  ShardingState cur = plan.start;
  for (const RedistributeStep& step : plan.steps) {
    const DTensorSpec before = src.WithPlacements(cur.placements, cur.order);
    const Shape local = ComputeLocalShape(before, coordinate);
    const int64_t w = mesh.size(step.axis);
    int64_t numel = NumElements(local);
    if (step.kind == StepKind::kAllGather || step.kind == StepKind::kReduceScatter) {
      // Gathers send their piece padded to the largest one; reduce_scatters send W such pieces.
      const bool gather = step.kind == StepKind::kAllGather;
      const size_t d = static_cast<size_t>(gather ? step.src_dim : step.dst_dim);
      const ShardingState after = ApplyStep(cur, step);
      const int64_t extent = gather ? ComputeLocalShape(src.WithPlacements(after.placements, after.order),
                                                        coordinate)[d]
                                    : local[d];
      int64_t rest = 1;
      for (size_t k = 0; k < local.size(); ++k) rest *= k == d ? 1 : local[k];
      const int64_t full = (extent + w - 1) / w;
      numel = full * rest * (gather ? 1 : w);
    }
    if (std::optional<comm::CollectiveKind> kind = CollectiveOf(step.kind)) {
      out.push_back({*kind, step.axis, mesh.axis_name(step.axis), numel * elem});
    }
    cur = ApplyStep(cur, step);
  }
  return out;
}

}  // namespace tessel::dtensor
