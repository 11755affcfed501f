// dtensor/sharding_rule.h — what a sharding rule is (OpCall in, candidate Strategies out), the rule
// registry keyed by op name, and the small layout helpers every rule file uses.
//
// A rule looks at one op call — the global spec of every tensor input, the attrs, the mesh — and returns
// one or more candidate strategies. A strategy says, for every input, the layout (placements + shard
// order) the local kernel needs; for every output, the global spec the local results form; and,
// optionally, how to rewrite the attrs for the local call (attrs that carry GLOBAL shapes, e.g.
// sum_backward's "shape", must name LOCAL shapes) or a custom local computation (embedding masking,
// loss-parallel cross_entropy, exact mean over uneven shards). The handler (dispatch.h) picks the
// cheapest candidate (PyTorch's cost model), redistributes the inputs that must move, runs the local op and
// wraps the outputs (the role of PyTorch's OpStrategy / OpSpec and sharding_propagator).
//
// Invariant: rules are pure — no communication, no tensor data, same answer on every rank (they read
// specs and attrs only), so every rank picks the same strategy and issues the same collectives. A
// strategy's output specs must describe exactly what the local computation returns on every rank
// (MakeDTensor checks the local shapes). Every registered op has either a rule or an explicit
// replicate-only mark (dispatch_test's registry test enforces it); replicate-only = gather every input
// to Replicate, run the dense op, return Replicate outputs.
//
// Example (dtensor/rules/softmax.cc):
//   std::vector<Strategy> SoftmaxRule(const OpCall& call) {
//     const int64_t dim = NormalizeDim(call.attrs.GetInt("dim"), call.spec(0).ndim(), "softmax");
//     ShardingState in = ReplicateDims(PartialToReplicate(call.state(0)), {dim});
//     return {Strategy{.inputs = {in}, .outputs = {OutputSpec{in, call.spec(0).shape()}}}};
//   }
//   const bool kRegistered = RegisterShardingRule("softmax", SoftmaxRule);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dispatch/attrs.h"
#include "core/dispatch/op.h"
#include "core/tensor/tensor.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/placement.h"
#include "dtensor/redistribute_planner.h"

namespace tessel::dtensor {

// One op call as a rule sees it. Dense 0-d inputs arrive as replicated DTensors (dispatch.h).
struct OpCall {
  const OpDef& op;
  std::span<const Tensor> inputs;             // the DTensor (or undefined) inputs
  std::span<const DTensorSpec* const> specs;  // per input; nullptr for an undefined input
  const Attrs& attrs;
  const DeviceMesh& mesh;

  int num_inputs() const { return static_cast<int>(specs.size()); }
  bool defined(int i) const { return specs[static_cast<size_t>(i)] != nullptr; }
  // REQUIRES: defined(i).
  const DTensorSpec& spec(int i) const { return *specs[static_cast<size_t>(i)]; }
  ShardingState state(int i) const { return StateOf(spec(i)); }
  int mesh_ndim() const { return mesh.ndim(); }
};

// The global spec of one output: its layout, shape and strides (empty strides = contiguous). The dtype
// is the local result's.
struct OutputSpec {
  ShardingState state;
  Shape shape;
  Shape strides;
};

// What a candidate is, for the tie-break table (dispatch.cc, TieBreakRank): among candidates that move
// the same number of bytes and inputs, the kind listed first wins.
enum class StrategyKind {
  kFollow,         // outputs follow the inputs' current layout (pointwise, views, reductions)
  kShard,          // a dim of the output sharded from a sharded input dim (batch, rows, cols, heads)
  kContract,       // a contracted / reduced sharded dim makes a Partial output
  kPartialLinear,  // a Partial input passes through a linear op
  kMasked,         // vocab-sharded embedding / loss parallel: masked local work + Partial or collectives
  kReplicate,      // everything replicated
};
std::string_view StrategyKindName(StrategyKind kind);

struct Strategy;
struct LocalContext;
// Attrs for the local kernel (global shapes rewritten to this rank's local ones).
using LocalAttrsFn = Attrs (*)(const LocalContext& ctx);
// A custom local computation; may issue collectives on the mesh (declared in extra_comm_bytes).
using LocalFn = TensorList (*)(const LocalContext& ctx);

struct Strategy {
  std::vector<std::optional<ShardingState>> inputs;  // nullopt exactly for undefined inputs
  std::vector<std::optional<OutputSpec>> outputs;    // nullopt: that output comes back undefined
  StrategyKind kind = StrategyKind::kFollow;
  LocalAttrsFn local_attrs = nullptr;  // null: the call's attrs as they are
  LocalFn local_fn = nullptr;          // null: DispatchLocal(op, local inputs, local attrs)
  int64_t extra_comm_bytes = 0;        // bytes local_fn's own collectives move (cost model)
  std::vector<int64_t> aux;            // small data for local_fn / local_attrs (e.g. mesh axes)
  // Inputs whose whole move is one all_reduce go in flat buckets, one collective per (mesh axis, reduce
  // op, dtype, device) instead of one per input: a multi-tensor op's Partial gradients (PyTorch's DDP
  // buckets / coalesced collectives). Same values; fewer rendezvous.
  bool coalesce_all_reduces = false;
  // Candidates of equal time go to the rule's order, as torch's strategy choice takes the first of the cheapest
  // (one that moves nothing still beats one that moves for free): no tie-break by bytes or kind. Set by rules
  // that list their candidates in torch's order (matmul, linear).
  bool torch_ties = false;
};

// What local_attrs / local_fn see once the inputs have been redistributed.
struct LocalContext {
  const OpCall& call;
  const Strategy& strategy;
  std::span<const Tensor> locals;  // local inputs in the strategy's layouts (undefined stays undefined)
  const Attrs& attrs;              // the local attrs (after local_attrs)

  // This rank's shape of output i / of input i under the strategy.
  Shape LocalOutputShape(int i) const;
  Shape LocalInputShape(int i) const;
  // This rank's global offset of output i per dim (layout.h).
  Shape OutputOffset(int i) const;
};

using ShardingRule = std::vector<Strategy> (*)(const OpCall& call);

// ---- registry ---------------------------------------------------------------------------------------

// What the handler may assume about an op without asking its rule.
struct RuleTraits {
  // Elementwise and shape-preserving: when every defined input has input 0's shape and layout and none
  // is Partial, each output has input 0's layout and shape (the rule would say so too). The handler
  // then skips strategy building (the hot path of small pointwise ops; see dispatch.cc).
  bool elementwise = false;
};

struct RuleEntry {
  ShardingRule rule = nullptr;
  bool replicate_only = false;
  std::string reason;  // why an op is replicate-only
  RuleTraits traits;
};
// Register at static-init time from dtensor/rules/<family>.cc. A second registration for the same op
// is a bug (kInternal). Returns true so it can initialize a `const bool`.
bool RegisterShardingRule(std::string op, ShardingRule rule, RuleTraits traits = {});
bool RegisterReplicateOnly(std::string op, std::string reason);
// nullptr when the op has neither a rule nor a replicate-only mark.
const RuleEntry* FindShardingRule(std::string_view op);
// (op, reason) of every replicate-only op, sorted by name.
std::vector<std::pair<std::string, std::string>> ReplicateOnlyOps();

// ---- layout helpers for rules -----------------------------------------------------------------------

// placements with the default shard order for a tensor of `ndim` dims.
ShardingState DefaultState(std::vector<Placement> placements, int64_t ndim);
ShardingState ReplicatedState(int mesh_ndim, int64_t ndim);
// Placement of `axis` set to `p`: the axis leaves its old dim's order and, for a Shard, joins the end of
// the new dim's order.
ShardingState SetAxis(const ShardingState& s, int axis, const Placement& p);
// Every axis that shards one of `dims` becomes Replicate.
ShardingState ReplicateDims(const ShardingState& s, std::span<const int64_t> dims);
ShardingState ReplicateDims(const ShardingState& s, std::initializer_list<int64_t> dims);
// Every Partial axis becomes Replicate.
ShardingState PartialToReplicate(const ShardingState& s);
// True when some axis is Partial.
bool HasPartial(const ShardingState& s);
// The same layout on a tensor whose dim d is dim_map[d] (-1: the dim disappears; axes sharding it
// become `dropped`). Orders follow their dims; Partial and Replicate axes are kept.
ShardingState RemapDims(const ShardingState& s, std::span<const int64_t> dim_map, int64_t out_ndim,
                        const Placement& dropped = Replicate{});
// Axes (ascending) that shard tensor dim `dim`, in `s`.
std::vector<int> AxesSharding(const ShardingState& s, int64_t dim);
// Product of the mesh sizes of the axes sharding `dim`.
int64_t NumShards(const ShardingState& s, int64_t dim, const DeviceMesh& mesh);

// "add(input 0: [4, 6] float32 [S(0)], input 1: [6] float32 [R]) on DeviceMesh(...) at rank 2" — for
// error messages (STYLE 19: op, shapes, placements, mesh, rank).
std::string DescribeCall(const OpCall& call);

}  // namespace tessel::dtensor
