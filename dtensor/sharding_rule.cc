// dtensor/sharding_rule.cc — the rule registry and the layout helpers rules share.
#include "dtensor/sharding_rule.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "core/base/error.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, RuleEntry, std::less<>> rules;
};
Registry& GetRegistry() {
  static auto* r = new Registry();
  return *r;
}

bool Register(std::string op, RuleEntry entry) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  TESSEL_INTERNAL_ASSERT(r.rules.find(op) == r.rules.end(), "sharding rule for op '", op, "' registered twice");
  r.rules.emplace(std::move(op), std::move(entry));
  return true;
}

// The layout of output/input `spec`-like (state, shape) at this rank.
LocalLayout LayoutAt(const ShardingState& state, const Shape& shape, const DeviceMesh& mesh) {
  return ComputeLocalShapeAndGlobalOffset(shape, mesh.shape(), state.placements, state.order, mesh.coordinate());
}

}  // namespace

std::string_view StrategyKindName(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kFollow:
      return "follow";
    case StrategyKind::kShard:
      return "shard";
    case StrategyKind::kContract:
      return "contract";
    case StrategyKind::kPartialLinear:
      return "partial_linear";
    case StrategyKind::kMasked:
      return "masked";
    case StrategyKind::kReplicate:
      return "replicate";
  }
  return "?";
}

Shape LocalContext::LocalOutputShape(int i) const {
  const OutputSpec& out = *strategy.outputs[static_cast<size_t>(i)];
  return LayoutAt(out.state, out.shape, call.mesh).local_shape;
}

Shape LocalContext::OutputOffset(int i) const {
  const OutputSpec& out = *strategy.outputs[static_cast<size_t>(i)];
  return LayoutAt(out.state, out.shape, call.mesh).global_offset;
}

Shape LocalContext::LocalInputShape(int i) const { return locals[static_cast<size_t>(i)].sizes(); }

bool RegisterShardingRule(std::string op, ShardingRule rule, RuleTraits traits) {
  TESSEL_INTERNAL_ASSERT(rule != nullptr, "null sharding rule for op '", op, "'");
  return Register(std::move(op), RuleEntry{rule, false, "", traits});
}

bool RegisterReplicateOnly(std::string op, std::string reason) {
  TESSEL_INTERNAL_ASSERT(!reason.empty(), "replicate-only op '", op, "' needs a reason");
  return Register(std::move(op), RuleEntry{nullptr, true, std::move(reason), {}});
}

const RuleEntry* FindShardingRule(std::string_view op) {
  Registry& r = GetRegistry();
  // NOTE: rules register during static initialization only; afterwards the map is read-only, so the
  // hot path does not lock (the dispatch overhead budget is a few microseconds).
  auto it = r.rules.find(op);
  return it == r.rules.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> ReplicateOnlyOps() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, entry] : r.rules) {
    if (entry.replicate_only) out.emplace_back(name, entry.reason);
  }
  return out;
}

// ---- layout helpers ---------------------------------------------------------------------------------

ShardingState DefaultState(std::vector<Placement> placements, int64_t ndim) {
  ShardOrder order = DefaultShardOrder(placements, ndim);
  return {std::move(placements), std::move(order)};
}

ShardingState ReplicatedState(int mesh_ndim, int64_t ndim) {
  return {std::vector<Placement>(static_cast<size_t>(mesh_ndim), Replicate{}), ShardOrder(static_cast<size_t>(ndim))};
}

ShardingState SetAxis(const ShardingState& s, int axis, const Placement& p) {
  ShardingState out = s;
  if (const Shard* old = std::get_if<Shard>(&s.placements[static_cast<size_t>(axis)])) {
    std::vector<int>& axes = out.order[static_cast<size_t>(old->dim)];
    axes.erase(std::remove(axes.begin(), axes.end(), axis), axes.end());
  }
  out.placements[static_cast<size_t>(axis)] = p;
  if (const Shard* now = std::get_if<Shard>(&p)) out.order[static_cast<size_t>(now->dim)].push_back(axis);
  return out;
}

ShardingState ReplicateDims(const ShardingState& s, std::span<const int64_t> dims) {
  ShardingState out = s;
  for (size_t a = 0; a < s.placements.size(); ++a) {
    const Shard* sh = std::get_if<Shard>(&s.placements[a]);
    if (sh != nullptr && std::find(dims.begin(), dims.end(), sh->dim) != dims.end()) {
      out = SetAxis(out, static_cast<int>(a), Replicate{});
    }
  }
  return out;
}

ShardingState ReplicateDims(const ShardingState& s, std::initializer_list<int64_t> dims) {
  return ReplicateDims(s, std::span<const int64_t>(dims.begin(), dims.size()));
}

ShardingState PartialToReplicate(const ShardingState& s) {
  ShardingState out = s;
  for (Placement& p : out.placements) {
    if (IsPartial(p)) p = Replicate{};
  }
  return out;
}

bool HasPartial(const ShardingState& s) {
  return std::any_of(s.placements.begin(), s.placements.end(), [](const Placement& p) { return IsPartial(p); });
}

ShardingState RemapDims(const ShardingState& s, std::span<const int64_t> dim_map, int64_t out_ndim,
                        const Placement& dropped) {
  ShardingState out{s.placements, ShardOrder(static_cast<size_t>(out_ndim))};
  for (size_t a = 0; a < s.placements.size(); ++a) {
    if (const Shard* sh = std::get_if<Shard>(&s.placements[a])) {
      const int64_t to = dim_map[static_cast<size_t>(sh->dim)];
      out.placements[a] = to >= 0 ? Placement(Shard{to}) : dropped;
    }
  }
  for (size_t d = 0; d < s.order.size(); ++d) {
    const int64_t to = dim_map[d];
    if (to >= 0) out.order[static_cast<size_t>(to)] = s.order[d];
  }
  return out;
}

std::vector<int> AxesSharding(const ShardingState& s, int64_t dim) {
  std::vector<int> axes;
  for (size_t a = 0; a < s.placements.size(); ++a) {
    if (IsShardOn(s.placements[a], dim)) axes.push_back(static_cast<int>(a));
  }
  return axes;
}

int64_t NumShards(const ShardingState& s, int64_t dim, const DeviceMesh& mesh) {
  int64_t n = 1;
  for (int a : AxesSharding(s, dim)) n *= mesh.size(a);
  return n;
}

std::string DescribeCall(const OpCall& call) {
  std::string s = call.op.name + "(";
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (i) s += ", ";
    s += Str("input ", i, ": ");
    if (!call.defined(i)) {
      s += "None";
      continue;
    }
    const DTensorSpec& spec = call.spec(i);
    s += Str(ShapeStr(spec.shape()), " ", DTypeName(spec.dtype()), " ", PlacementsToString(spec.placements()));
    if (!IsDefaultShardOrder(spec.shard_order())) s += " order " + ShardOrderToString(spec.shard_order());
  }
  return Str(s, ") on ", call.mesh.ToString(), " at rank ", call.mesh.global_rank());
}

}  // namespace tessel::dtensor
