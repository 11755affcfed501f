// dtensor/dispatch.h — the DTensor path of the one dispatcher (DESIGN.md "DTensor is a kind of Tensor"):
// propagate sharding (rule → candidate strategies → the cheapest), redistribute the inputs that must
// move, run the local op on local shards, wrap the outputs as DTensors.
//
// Linking //dtensor:dtensor installs DispatchDistributed with SetDistributedHandler at static
// initialization, so Dispatch() routes every call with a DTensor input here.
//
// Invariant: for every op call with a DTensor input, every rank of the mesh picks the same strategy
// (rules and the cost model read global specs only) and so issues the same collectives in the same
// order; the outputs hold exactly the global values the dense op would compute on the full inputs.
//
// Semantics (PyTorch's DTensor dispatch where it is right):
//   * A dense 0-d input is a replicated scalar; any other dense input next to a DTensor raises
//     kInvalidArgument naming the op and both kinds (convert it with DistributeTensor first), except
//     under ImplicitReplicationGuard (below), where one that does not require grad is Replicate.
//   * All DTensor inputs must live on one mesh (kInvalidArgument naming both meshes).
//   * Strategy choice: fewest Shards padded into Partials, then cheapest by PyTorch's cost model (a latency
//     per collective, an all-to-all penalty, per-hop latency and bandwidth of torch's MeshTopoInfo (every
//     dim of a CPU mesh inter-host), over torch's greedy redistribute steps: RedistributeMicros), then by
//     bytes moved, by number of inputs that change layout, by an ordered table of strategy kinds
//     (TieBreakRank), then by rule order; rules that list candidates in torch's order (Strategy::torch_ties)
//     skip the bytes and kind tie-breaks, as torch takes the first of the cheapest.
//   * Inputs move with the redistribute executor, under grad mode off: autograd (above Dispatch) records
//     the op itself at the DTensor level, and its backward formula runs through this path again.
//   * In-place ops (add_, mul_, copy_, adamw_step_, sgd_step_) write into input 0's local shard, which
//     never moves; other inputs move to match it. When no strategy keeps input 0's layout the call
//     raises kInvalidArgument naming op, shapes, placements, mesh and rank.
//   * A leaf's gradient keeps the placements its backward formula produced (as in PyTorch); optimizer
//     steps redistribute the gradient to the parameter's placements (e.g. a Partial gradient of a
//     replicated parameter is all-reduced there, DDP-style) and require the state to match exactly.
//
// Example:
//   DTensor y = DTensor(Relu(Matmul(x, w)));   // x: [S(0)], w: [R] → y: [S(0)], no communication
//   ShardingDecision d = PropagateSharding(GetOp("matmul"), TensorList{x, w}, Attrs());
//   d.ToString();   // "shard: inputs [S(0)], [R] -> outputs [S(0)], 0 B, 0 moved, 2 candidates"
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dispatch/attrs.h"
#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "dtensor/redistribute_planner.h"
#include "dtensor/sharding_rule.h"

namespace tessel::dtensor {

// Scoped, per thread: a dense input that does not require grad, next to DTensor inputs, is taken as
// Replicate on their mesh (core/dispatch/dispatcher.h, where the flag lives so core/ops can set it).
using ImplicitReplicationGuard = ::tessel::ImplicitReplicationGuard;
using ::tessel::ImplicitReplicationEnabled;

// The handler installed into the dispatcher (core/dispatch/dispatcher.h).
TensorList DispatchDistributed(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);
DistributedHandler DistributedHandlerFn();

// What the handler would do for a call, without doing it (no communication): the chosen strategy's
// input and output layouts and its estimated cost. Replicate-only ops report all-Replicate layouts.
struct ShardingDecision {
  StrategyKind kind = StrategyKind::kReplicate;
  std::vector<std::optional<ShardingState>> inputs;
  std::vector<std::optional<ShardingState>> outputs;  // empty for replicate-only ops (decided later)
  int64_t bytes = 0;         // estimated bytes this rank moves (redistributes + the strategy's own)
  int num_moved_inputs = 0;  // inputs whose layout changes
  int num_candidates = 0;
  bool replicate_only = false;
  std::string ToString() const;
};
ShardingDecision PropagateSharding(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);

// Estimated bytes this rank sends to move a tensor of spec `src` to layout `dst` (reported with a strategy
// choice, and its tie-break after the time estimate); nullopt when the transition is illegal
// (Partial(op1) -> Partial(op2)).
std::optional<int64_t> RedistributeBytes(const DTensorSpec& src, const ShardingState& dst);

// PyTorch's estimate of that move in microseconds (torch/distributed/tensor/_collective_utils.py, redistribute_cost:
// the model the strategy choice prices moves with); nullopt where torch's model is infinite: a Partial changing its
// reduce op, or a Shard padded into a Partial. Python's register_sharding chooses among a user's strategies with it.
// `devices_per_host`: torch's torch.<device>.device_count(), one for CPU tensors (DevicesPerHost), which makes
// every mesh dim of more than one rank inter-host in torch's model (MeshTopoInfo).
std::optional<double> RedistributeMicros(const DTensorSpec& src, const ShardingState& dst, int devices_per_host);
int DevicesPerHost(const Tensor& t);

}  // namespace tessel::dtensor
