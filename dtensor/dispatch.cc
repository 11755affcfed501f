// dtensor/dispatch.cc — the DTensor handler: input checks, strategy choice (cost model + tie-break
// table), input redistribution, the local call, output wrapping; installed at static initialization.
#include "dtensor/dispatch.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "core/autograd/node.h"
#include "core/base/error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/device_backend.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/layout.h"
#include "dtensor/redistribute.h"

namespace tessel::dtensor {
namespace {

// [The tie-break table] Among candidates that move the same bytes and the same number of inputs, the
// kind listed first wins: keep the layout the data already has; then sharded outputs (less memory than
// replicated ones); then Partial outputs (a reduction is owed later); masked vocab-parallel work; and
// everything-replicated last. This is the only place where the order among candidate kinds is decided
// (never registration order); remaining ties go to the rule's own order.
int TieBreakRank(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kFollow:
      return 0;
    case StrategyKind::kShard:
      return 1;
    case StrategyKind::kContract:
      return 2;
    case StrategyKind::kPartialLinear:
      return 3;
    case StrategyKind::kMasked:
      return 4;
    case StrategyKind::kReplicate:
      return 5;
  }
  return 6;
}

// The inputs of one call, with dense 0-d inputs wrapped as replicated DTensors.
struct Prepared {
  TensorList inputs;
  std::vector<const DTensorSpec*> specs;
  const DeviceMesh* mesh = nullptr;
};

std::string KindOf(const Tensor& t) {
  if (const DTensorImpl* d = AsDTensorImpl(t)) {
    return Str("a DTensor of shape ", ShapeStr(t.sizes()), " (", PlacementsToString(d->spec().placements()), " on ",
               d->mesh().ToString(), ")");
  }
  return Str("a ", t.impl()->KindName(), " tensor of shape ", ShapeStr(t.sizes()));
}

// `t` (dense) as a Replicate DTensor on `mesh`: its value is the same on every rank.
Tensor AsReplicated(const Tensor& t, const DeviceMesh& mesh) {
  DTensorSpec spec(mesh.topology_ptr(), std::vector<Placement>(static_cast<size_t>(mesh.ndim()), Replicate{}),
                   t.sizes(), t.dtype());
  return MakeDTensor(t, std::move(spec), mesh);
}

// The ImplicitReplicator (core/dispatch/dispatcher.h): dense inputs that do not require grad become Replicate
// on the first DTensor input's mesh (Prepare checks the meshes and the rest, as for any call).
TensorList ReplicateDenseInputs(TensorList inputs) {
  const DTensorImpl* lead = nullptr;
  for (const Tensor& t : inputs) {
    if (lead == nullptr && t.defined()) lead = AsDTensorImpl(t);
  }
  if (lead == nullptr) return inputs;
  const DeviceMesh mesh = lead->mesh();
  for (Tensor& t : inputs) {
    if (t.defined() && !t.is_distributed() && !t.requires_grad()) t = AsReplicated(t, mesh);
  }
  return inputs;
}

Prepared Prepare(const OpDef& op, std::span<const Tensor> raw) {
  Prepared p;
  size_t first = raw.size();
  for (size_t i = 0; i < raw.size() && first == raw.size(); ++i) {
    if (AsDTensorImpl(raw[i]) != nullptr) first = i;
  }
  TESSEL_INTERNAL_ASSERT(first < raw.size(), op.name, ": the distributed handler got no DTensor input");
  const DTensorImpl& lead = *AsDTensorImpl(raw[first]);
  p.mesh = &lead.mesh();
  p.inputs.assign(raw.begin(), raw.end());
  p.specs.assign(raw.size(), nullptr);
  for (size_t i = 0; i < raw.size(); ++i) {
    const Tensor& t = raw[i];
    if (!t.defined()) continue;
    if (const DTensorImpl* d = AsDTensorImpl(t)) {
      TESSEL_CHECK(d->mesh() == lead.mesh(), op.name, ": input ", i, " lives on ", d->mesh().ToString(), " but input ",
                   first, " on ", lead.mesh().ToString(),
                   "; all DTensor operands of one op must share a mesh (redistributing across meshes is not "
                   "supported), rank ",
                   lead.mesh().global_rank());
      continue;
    }
    // One-element dense tensors (0-d, or [1] as torch.ones(1)) are replicated scalars, as torch's
    // (_try_replicate_spec_for_scalar_tensor; it warns about the non-0-d ones).
    TESSEL_CHECK(t.numel() == 1 || (ImplicitReplicationEnabled() && !t.requires_grad()), op.name,
                 ": got mixed DTensor and dense tensor inputs: input ", first, " is ", KindOf(raw[first]),
                 " but input ", i, " is ", KindOf(t),
                 "; convert the dense tensor with DistributeTensor or DTensor::FromLocal first (only one-element dense "
                 "tensors are accepted, as replicated scalars, and under ImplicitReplicationGuard dense tensors "
                 "that do not require grad), rank ",
                 lead.mesh().global_rank());
    p.inputs[i] = AsReplicated(t, lead.mesh());
  }
  for (size_t i = 0; i < raw.size(); ++i) {
    if (const DTensorImpl* d = AsDTensorImpl(p.inputs[i])) p.specs[i] = &d->spec();
  }
  return p;
}

// Lexicographic cost of a candidate (smaller wins). `padded` counts inputs moved from a Shard to a Partial on
// some axis: a full-size buffer, zeros but the shard, which PyTorch's cost model prices infinite, so it happens
// only when every candidate needs one (an in-place op writing a Partial from a Shard): P(sum) + S(0)
// reduce-scatters the Partial instead of padding the Shard.
// `micros` is PyTorch's estimate of the moves' time (RedistributeMicros: torch's model over its greedy redistribute
// steps; PriceMove's mesh-order estimate where that is infinite, a padded Shard) and `bytes` what they send.
struct Cost {
  int padded = 0;
  double micros = 0;
  int64_t bytes = 0;
  int moved = 0;
  int rank = 0;
  size_t index = 0;
  friend bool operator<(const Cost& a, const Cost& b) {
    return std::tie(a.padded, a.micros, a.bytes, a.moved, a.rank, a.index) <
           std::tie(b.padded, b.micros, b.bytes, b.moved, b.rank, b.index);
  }
};

// What moving one input from `src` to `dst` costs, in one pass over the mesh axes:
//   * bytes: what this rank sends (a ShardingDecision reports it; a tie-break after the time);
//   * micros: PyTorch's cost model of the move (torch/distributed/tensor/_collective_utils.py, redistribute_cost),
//     with the axes in mesh order: the stand-in where RedistributeMicros (torch's step order) does not apply, a
//     Shard padded into a Partial or a shard order other than the default. A ring collective over w ranks costs a
//     fixed 6.6 µs, 0.6 µs per hop (w - 1 hops; an all_reduce 2 (w - 1)) and its bytes' share (hops / w) at
//     87.7 GB/s; a Shard -> Shard move is an all_gather of the shard plus 1 µs, which makes small tensors gather
//     rather than all-to-all, as torch's do. Axes are taken in mesh order, the bytes growing by w after an
//     all_gather and shrinking by w after a reduce-scatter or a local chunk. A Replicate source moves for free;
//   * pads_a_shard: a Shard becomes a Partial on some axis (Cost::padded).
// nullopt when the move is illegal (Partial(op1) -> Partial(op2) on an axis of more than one rank).
struct MovePrice {
  int64_t bytes = 0;
  double micros = 0;
  bool pads_a_shard = false;
};

constexpr double kRingLatencyMicros = 6.6, kHopMicros = 0.6, kBytesPerMicro = 87.7 * (1 << 30) / 1e6;
// torch's MeshTopoInfo: a mesh dim whose devices, with those of the dims to its right, exceed one host's is
// inter-host: 2.7 µs per hop and 0.22 of the bandwidth. A host holds torch.<device>.device_count() devices: one
// for the CPU, so on CPU meshes every dim of more than one rank is inter-host.
constexpr double kInterHostHopMicros = 2.7, kInterHostBandwidth = 0.22;

struct AxisLink {
  double hop_micros = kHopMicros;
  double bytes_per_micro = kBytesPerMicro;
};

AxisLink LinkOf(const MeshTopology& mesh, int axis, int devices_per_host) {
  int64_t devices = 1;
  for (int a = mesh.ndim() - 1; a >= axis; --a) devices *= mesh.size(a);
  if (devices <= devices_per_host) return {};
  return {kInterHostHopMicros, kBytesPerMicro * kInterHostBandwidth};
}

double RingMicros(double bytes, int64_t w, int64_t hops, const AxisLink& link) {
  return kRingLatencyMicros + static_cast<double>(hops) * link.hop_micros +
         bytes * static_cast<double>(hops) / static_cast<double>(w) / link.bytes_per_micro;
}

// One transition on a mesh axis of w ranks as torch's _compute_placement_transition_cost prices it: its time, with
// `bytes` (the piece torch's model carries from step to step) grown by an all_gather and shrunk by a reduce-scatter
// or a local chunk; nullopt where torch's model is infinite (a Shard, or a Partial of another op, made Partial).
std::optional<double> StepMicros(const Placement& p, const Placement& q, int64_t w, const AxisLink& link,
                                 double& bytes) {
  const auto ranks = static_cast<double>(w);
  if (p == q) return 0.0;
  if (IsShard(p) && IsReplicate(q)) {  // all_gather
    bytes *= ranks;
    return RingMicros(bytes, w, w - 1, link);
  }
  if (IsShard(p) && IsShard(q)) return RingMicros(bytes, w, w - 1, link) + 1.0;    // all_to_all
  if (IsPartial(p) && IsReplicate(q)) return RingMicros(bytes, w, 2 * (w - 1), link);  // all_reduce
  if (IsPartial(p) && IsShard(q)) {  // reduce_scatter
    const double micros = RingMicros(bytes, w, w - 1, link);
    bytes /= ranks;
    return micros;
  }
  if (IsShard(p) || IsPartial(p)) return std::nullopt;  // -> a Partial
  if (IsShard(q)) bytes /= ranks;                         // local chunk; Replicate -> Partial is free too
  return 0.0;
}

std::optional<MovePrice> PriceMove(const DTensorSpec& src, const ShardingState& dst, int devices_per_host) {
  const MeshTopology& mesh = src.mesh();
  int64_t shards = 1;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (IsShard(src.placement(a))) shards *= mesh.size(a);
  }
  const int64_t local = src.numel() * ElementSize(src.dtype()) / std::max<int64_t>(shards, 1);
  double running = static_cast<double>(local);  // the bytes torch's model carries from step to step
  MovePrice price;
  for (int a = 0; a < mesh.ndim(); ++a) {
    const Placement& p = src.placement(a);
    const Placement& q = dst.placements[static_cast<size_t>(a)];
    const int64_t w = mesh.size(a);
    const AxisLink link = LinkOf(mesh, a, devices_per_host);
    if (p == q) continue;
    if (w > 1 && IsPartial(p) && IsPartial(q)) return std::nullopt;
    const int64_t piece = static_cast<int64_t>(running);  // this step's local bytes
    int64_t sent = 0;  // R -> S (local chunk) and R -> P (partition) send nothing
    if (IsShard(p) && IsPartial(q)) {  // all_gather + partition: infinite in torch's model, priced here
      sent = piece * (w - 1);
      price.micros += RingMicros(running * static_cast<double>(w), w, w - 1, link);
      price.pads_a_shard = true;
    } else if (const std::optional<double> micros = StepMicros(p, q, w, link, running)) {
      price.micros += *micros;
      if (IsShard(p) && IsReplicate(q)) sent = piece * (w - 1);                     // all_gather
      if (IsPartial(p) && IsReplicate(q)) sent = 2 * piece * (w - 1) / w;           // all_reduce
      if (!IsReplicate(p) && IsShard(q)) sent = piece * (w - 1) / w;                // all_to_all, reduce_scatter
    }
    if (w > 1) price.bytes += sent;
  }
  if (src.placements() == dst.placements && src.shard_order() != dst.order) {  // the same placements, reordered
    if (price.bytes == 0) price.bytes = local;
    if (price.micros == 0) {  // priced as an all-to-all
      price.micros = RingMicros(running, 2, 1, LinkOf(mesh, 0, devices_per_host)) + 1.0;
    }
  }
  if (std::all_of(src.placements().begin(), src.placements().end(), IsReplicate)) price.micros = 0;
  return price;
}

// torch's redistribute_cost (_collective_utils.py) over the steps of its greedy planner
// (generate_greedy_transform_infos in _redistribute.py): on a mesh of several dims with a sharded source, the dims
// from last to first (a dim whose target Shard would nest differently from its source's is made Replicate first),
// then first to last for what is left, each step priced by StepMicros: a local chunk before a gather shrinks what
// the gather sends. `price` is PriceMove's for the same move: its mesh-order estimate stands in where the source or
// the target has a shard order other than the default (torch plans those with its graph search). nullopt where
// torch's model is infinite.
std::optional<double> TorchMicros(const DTensorSpec& src, const ShardingState& dst, int devices_per_host,
                                  const MovePrice& price) {
  if (price.pads_a_shard) return std::nullopt;
  if (std::all_of(src.placements().begin(), src.placements().end(), IsReplicate)) return 0.0;
  const MeshTopology& mesh = src.mesh();
  const int n = mesh.ndim();
  const auto ndim = static_cast<int64_t>(src.shape().size());
  if (src.shard_order() != DefaultShardOrder(src.placements(), ndim) ||
      dst.order != DefaultShardOrder(dst.placements, ndim)) {
    return price.micros;
  }
  int64_t shards = 1;
  for (int a = 0; a < n; ++a) {
    if (IsShard(src.placement(a))) shards *= mesh.size(a);
  }
  double bytes = static_cast<double>(src.numel() * ElementSize(src.dtype())) / static_cast<double>(shards);
  double micros = 0;
  const auto step = [&](int a, const Placement& p, const Placement& q) {  // false: infinite
    const std::optional<double> m = StepMicros(p, q, mesh.size(a), LinkOf(mesh, a, devices_per_host), bytes);
    micros += m.value_or(0.0);
    return m.has_value();
  };
  std::vector<Placement> cur = src.placements();
  const std::vector<Placement>& want = dst.placements;
  const auto shards_of = [&](const std::vector<Placement>& pl, int64_t dim, int below) {
    std::vector<int> axes;
    for (int i = 0; i < below; ++i) {
      if (const Shard* s = std::get_if<Shard>(&pl[static_cast<size_t>(i)]); s != nullptr && s->dim == dim) {
        axes.push_back(i);
      }
    }
    return axes;
  };
  if (n > 1 && shards > 1) {
    for (int a = n - 1; a >= 0; --a) {
      Placement target = want[static_cast<size_t>(a)];
      if (const Shard* s = std::get_if<Shard>(&target);
          s != nullptr && shards_of(cur, s->dim, a) != shards_of(want, s->dim, a)) {
        target = Replicate{};
      }
      if (!step(a, cur[static_cast<size_t>(a)], target)) return std::nullopt;
      cur[static_cast<size_t>(a)] = target;
    }
  }
  for (int a = 0; a < n; ++a) {
    if (!step(a, cur[static_cast<size_t>(a)], want[static_cast<size_t>(a)])) return std::nullopt;
  }
  return micros;
}

std::optional<Cost> Evaluate(const OpCall& call, const Strategy& s, size_t index, int per_host) {
  TESSEL_INTERNAL_ASSERT(s.inputs.size() == static_cast<size_t>(call.num_inputs()), call.op.name,
                         ": a sharding strategy lists ", s.inputs.size(), " inputs for ", call.num_inputs());
  Cost cost{.micros = static_cast<double>(s.extra_comm_bytes) / kBytesPerMicro, .bytes = s.extra_comm_bytes,
            .rank = TieBreakRank(s.kind), .index = index};
  for (int i = 0; i < call.num_inputs(); ++i) {
    const std::optional<ShardingState>& want = s.inputs[static_cast<size_t>(i)];
    TESSEL_INTERNAL_ASSERT(want.has_value() == call.defined(i), call.op.name, ": strategy input ", i, " is ",
                           want ? "set" : "unset", " for a", call.defined(i) ? " defined" : "n undefined", " input");
    if (!want) continue;
    const DTensorSpec& spec = call.spec(i);
    if (spec.placements() == want->placements && spec.shard_order() == want->order) continue;
    if (i == 0 && call.op.is_inplace) return std::nullopt;  // the written tensor never moves
    const std::optional<MovePrice> price = PriceMove(spec, *want, per_host);
    if (!price) return std::nullopt;
    cost.bytes += price->bytes;
    cost.micros += TorchMicros(spec, *want, per_host, *price).value_or(price->micros);  // nullopt: a padded Shard
    cost.padded += price->pads_a_shard;
    ++cost.moved;
  }
  if (s.torch_ties) {
    cost.bytes = 0;
    cost.rank = 0;
    if (cost.micros > 0) cost.moved = 0;
  }
  return cost;
}

struct Choice {
  const Strategy* strategy = nullptr;
  Cost cost;
};

Choice Choose(const OpCall& call, const std::vector<Strategy>& candidates) {
  Choice best;
  int per_host = 1;  // torch's MeshTopoInfo: the devices one host holds, read from the inputs' device
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (call.defined(i)) {
      per_host = DevicesPerHost(call.inputs[static_cast<size_t>(i)]);
      break;
    }
  }
  for (size_t k = 0; k < candidates.size(); ++k) {
    const std::optional<Cost> c = Evaluate(call, candidates[k], k, per_host);
    if (c && (best.strategy == nullptr || *c < best.cost)) best = {&candidates[k], *c};
  }
  if (best.strategy != nullptr) return best;
  if (call.op.is_inplace) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, call.op.name,
                ": in-place op cannot keep the layout of the tensor it "
                "writes (",
                PlacementsToString(call.spec(0).placements()),
                "): no strategy computes the result in "
                "that layout; call ",
                DescribeCall(call), ". Redistribute the written tensor first or use the out-of-place op");
  }
  TESSEL_FAIL(ErrorCode::kInvalidArgument, call.op.name, ": no legal sharding strategy among ", candidates.size(),
              " candidates for ", DescribeCall(call),
              " (a Partial input would have to change its reduce op); redistribute the inputs first");
}

Tensor MoveInput(const OpCall& call, int i, const ShardingState& want) {
  const DTensorImpl& d = *AsDTensorImpl(call.inputs[static_cast<size_t>(i)]);
  const std::optional<RedistributePlan> plan = PlanMove(d.spec(), want, call.mesh);
  return plan ? ExecuteRedistribute(d.local(), d.spec(), *plan, call.mesh) : d.local();
}

TensorList MoveInputs(const OpCall& call, const Strategy& s) {
  if (s.coalesce_all_reduces) return ExecuteRedistributesCoalesced(call.inputs, s.inputs, call.mesh);
  TensorList locals(static_cast<size_t>(call.num_inputs()));
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (call.defined(i)) locals[static_cast<size_t>(i)] = MoveInput(call, i, *s.inputs[static_cast<size_t>(i)]);
  }
  return locals;
}

// Moves the output specs out of `s` (the strategy is used up).
TensorList WrapOutputs(const OpCall& call, Strategy& s, const TensorList& locals) {
  TESSEL_INTERNAL_ASSERT(locals.size() == s.outputs.size(), call.op.name, ": the local op returned ", locals.size(),
                         " outputs but its sharding strategy describes ", s.outputs.size());
  TensorList out(locals.size());
  for (size_t i = 0; i < locals.size(); ++i) {
    if (!locals[i].defined()) continue;
    if (i == 0 && call.op.is_inplace) {
      out[0] = call.inputs[0];  // the written DTensor itself, as the dense kernel returns its dst
      continue;
    }
    TESSEL_INTERNAL_ASSERT(s.outputs[i].has_value(), call.op.name, ": output ", i, " has no spec");
    OutputSpec& o = *s.outputs[i];
    Shape strides = o.strides.empty() ? ContiguousStrides(o.shape) : std::move(o.strides);
    DTensorSpec spec(call.mesh.topology_ptr(), std::move(o.state.placements), std::move(o.shape), std::move(strides),
                     locals[i].dtype(), std::move(o.state.order));
    out[i] = MakeDTensor(locals[i], std::move(spec), call.mesh);
  }
  return out;
}

// Whether two local pieces share memory (a view of the other).
bool SameStorage(const Tensor& a, const Tensor& b) {
  const Storage& sa = a.impl()->storage();
  const Storage& sb = b.impl()->storage();
  return sa.defined() && sb.defined() && sa.data() == sb.data();
}

// A view op's outputs that are not views of input 0 (its local piece was redistributed first, or the rule's local
// function copied, or input 0 is itself such a copy): marked so that an in-place write to one is refused
// (DTensorImpl::view_copy_of). Every output: split / chunk / unbind give several.
void MarkViewCopy(const OpCall& call, TensorList& out) {
  if (!call.op.is_view) return;
  const DTensorImpl* in = AsDTensorImpl(call.inputs[0]);
  if (in == nullptr) return;
  for (Tensor& o : out) {
    auto* impl = o.defined() ? const_cast<DTensorImpl*>(AsDTensorImpl(o)) : nullptr;
    if (impl == nullptr || o.numel() == 0) continue;
    if (in->view_copy_of().empty() && SameStorage(impl->local(), in->local())) continue;
    impl->set_view_copy_of(in->view_copy_of().empty() ? call.op.name : in->view_copy_of());
  }
}

TensorList RunStrategy(const OpCall& call, Strategy& s) {
  const TensorList locals = MoveInputs(call, s);
  const Attrs local_attrs =
      s.local_attrs != nullptr ? s.local_attrs(LocalContext{call, s, locals, call.attrs}) : Attrs();
  const Attrs& attrs = s.local_attrs != nullptr ? local_attrs : call.attrs;
  const LocalContext ctx{call, s, locals, attrs};
  const TensorList results = s.local_fn != nullptr ? s.local_fn(ctx) : DispatchLocal(call.op, locals, attrs);
  TensorList out = WrapOutputs(call, s, results);
  MarkViewCopy(call, out);
  return out;
}

// Replicate-only: every input to Replicate, the dense op on full tensors, Replicate outputs.
Strategy ReplicateAll(const OpCall& call) {
  Strategy s;
  s.kind = StrategyKind::kReplicate;
  for (int i = 0; i < call.num_inputs(); ++i) {
    s.inputs.push_back(call.defined(i)
                           ? std::optional<ShardingState>(ReplicatedState(call.mesh_ndim(), call.spec(i).ndim()))
                           : std::nullopt);
  }
  return s;
}

TensorList RunReplicateOnly(const OpCall& call) {
  Strategy s = ReplicateAll(call);
  const TensorList locals = MoveInputs(call, s);
  const TensorList results = DispatchLocal(call.op, locals, call.attrs);
  for (const Tensor& r : results) {
    s.outputs.push_back(r.defined() ? std::optional<OutputSpec>(
                                          OutputSpec{ReplicatedState(call.mesh_ndim(), r.dim()), r.sizes(), Shape()})
                                    : std::nullopt);
  }
  TensorList out = WrapOutputs(call, s, results);
  MarkViewCopy(call, out);
  return out;
}

const RuleEntry& GetEntry(const OpCall& call) {
  const RuleEntry* entry = FindShardingRule(call.op.name);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, entry != nullptr, call.op.name,
                    ": no sharding rule is registered for this op (add one to dtensor/rules/ or mark it "
                    "replicate-only); call ",
                    DescribeCall(call));
  return *entry;
}

std::vector<std::optional<ShardingState>> OutputStates(const Strategy& s) {
  std::vector<std::optional<ShardingState>> out;
  for (const std::optional<OutputSpec>& o : s.outputs) {
    out.push_back(o ? std::optional<ShardingState>(o->state) : std::nullopt);
  }
  return out;
}

std::string StatesToString(const std::vector<std::optional<ShardingState>>& states) {
  std::string s;
  for (size_t i = 0; i < states.size(); ++i) {
    if (i) s += ", ";
    s += states[i] ? PlacementsToString(states[i]->placements) : "None";
  }
  return s;
}

// [Note: elementwise fast path] Most op calls of a training step are small pointwise ops whose DTensor
// operands already agree (same shape, same layout, nothing Partial); their rule can only answer "follow
// input 0". For ops registered with RuleTraits::elementwise the handler answers that itself: no
// candidates, no cost model, no redistribute, the local results wrapped in input 0's spec. This keeps
// the per-op overhead within the few-microsecond budget (dtensor_dispatch_overhead_us).
bool InputsAgree(const OpCall& call) {
  if (!call.defined(0) || call.spec(0).has_partial()) return false;
  const DTensorSpec& first = call.spec(0);
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) continue;
    const DTensorSpec& s = call.spec(i);
    if (&s != &first && (s.shape() != first.shape() || s.placements() != first.placements() ||
                         s.shard_order() != first.shard_order())) {
      return false;
    }
  }
  return true;
}

TensorList RunElementwise(const OpCall& call) {
  TensorList locals(static_cast<size_t>(call.num_inputs()));
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (call.defined(i)) locals[static_cast<size_t>(i)] = AsDTensorImpl(call.inputs[static_cast<size_t>(i)])->local();
  }
  TensorList out = DispatchLocal(call.op, locals, call.attrs);
  const DTensorSpec& first = call.spec(0);
  const bool contiguous = first.strides() == ContiguousStrides(first.shape());
  for (Tensor& t : out) {
    if (!t.defined()) continue;
    TESSEL_INTERNAL_ASSERT(t.sizes() == locals[0].sizes(), call.op.name,
                           ": an elementwise op returned a local of shape ", ShapeStr(t.sizes()),
                           " for inputs of local shape ", ShapeStr(locals[0].sizes()));
    DTensorSpec spec =
        contiguous && t.dtype() == first.dtype()
            ? first
            : DTensorSpec(first.mesh_ptr(), first.placements(), first.shape(), t.dtype(), first.shard_order());
    t = Tensor(std::make_shared<DTensorImpl>(t, std::move(spec), call.mesh));
  }
  return out;
}

}  // namespace

int DevicesPerHost(const Tensor& t) {
  const Tensor& local = t.is_distributed() ? AsDTensorImpl(t)->local() : t;
  if (local.device().is_cpu()) return 1;
  memory::DeviceBackend* backend = memory::GetDeviceBackend();
  return backend == nullptr ? 1 : std::max(1, backend->DeviceCount());
}

std::optional<int64_t> RedistributeBytes(const DTensorSpec& src, const ShardingState& dst) {
  const std::optional<MovePrice> price = PriceMove(src, dst, 1);
  return price ? std::optional<int64_t>(price->bytes) : std::nullopt;
}

std::optional<double> RedistributeMicros(const DTensorSpec& src, const ShardingState& dst, int devices_per_host) {
  if (src.placements() == dst.placements && src.shard_order() == dst.order) return 0.0;
  const std::optional<MovePrice> price = PriceMove(src, dst, devices_per_host);
  return price ? TorchMicros(src, dst, devices_per_host, *price) : std::nullopt;
}

TensorList DispatchDistributed(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  const Prepared p = Prepare(op, inputs);
  const OpCall call{op, p.inputs, p.specs, attrs, *p.mesh};
  if (op.is_inplace) CheckWritesThrough(call.inputs[0], op.name);
  const RuleEntry& entry = GetEntry(call);
  if (entry.replicate_only) return RunReplicateOnly(call);
  if (entry.traits.elementwise && !op.is_inplace && InputsAgree(call)) return RunElementwise(call);
  std::vector<Strategy> candidates = entry.rule(call);
  const Choice choice = Choose(call, candidates);
  return RunStrategy(call, candidates[choice.cost.index]);
}

DistributedHandler DistributedHandlerFn() { return &DispatchDistributed; }

ShardingDecision PropagateSharding(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  const Prepared p = Prepare(op, inputs);
  const OpCall call{op, p.inputs, p.specs, attrs, *p.mesh};
  const RuleEntry& entry = GetEntry(call);
  ShardingDecision d;
  if (entry.replicate_only) {
    const Strategy s = ReplicateAll(call);
    d.inputs = s.inputs;
    d.replicate_only = true;
    d.num_candidates = 1;
    for (int i = 0; i < call.num_inputs(); ++i) {
      if (!call.defined(i) || call.spec(i).placements() == s.inputs[static_cast<size_t>(i)]->placements) continue;
      d.bytes += RedistributeBytes(call.spec(i), *s.inputs[static_cast<size_t>(i)]).value_or(0);
      ++d.num_moved_inputs;
    }
    return d;
  }
  const std::vector<Strategy> candidates = entry.rule(call);
  const Choice c = Choose(call, candidates);
  d.kind = c.strategy->kind;
  d.inputs = c.strategy->inputs;
  d.outputs = OutputStates(*c.strategy);
  d.bytes = c.cost.bytes;
  d.num_moved_inputs = c.cost.moved;
  d.num_candidates = static_cast<int>(candidates.size());
  return d;
}

std::string ShardingDecision::ToString() const {
  return Str(StrategyKindName(kind), replicate_only ? " (replicate-only)" : "", ": inputs ", StatesToString(inputs),
             " -> outputs ", StatesToString(outputs), ", ", bytes, " B, ", num_moved_inputs, " moved, ", num_candidates,
             " candidates");
}

namespace {
// autograd::SetLeafGradLayout's rule: on each mesh axis where the leaf is sharded and its gradient is not laid
// out the same (Partial: reduce-scattered; another dim or Replicate: moved), the gradient takes the leaf's
// sharding; other axes keep theirs (a Replicate parameter's Partial gradient stays owed, as torch's).
Tensor LeafGradLayoutOf(const Tensor& grad, const Tensor& leaf) {
  const DTensorImpl* g = AsDTensorImpl(grad);
  const DTensorImpl* l = AsDTensorImpl(leaf);
  if (g == nullptr || l == nullptr || !(g->spec().mesh() == l->spec().mesh()) ||
      g->spec().shape() != l->spec().shape()) {
    return grad;
  }
  std::vector<Placement> target = g->spec().placements();
  bool moved = false;
  for (int a = 0; a < l->spec().mesh().ndim(); ++a) {
    const Placement& want = l->spec().placement(a);
    if (std::holds_alternative<Shard>(want) && !(target[static_cast<size_t>(a)] == want)) {
      target[static_cast<size_t>(a)] = want;
      moved = true;
    }
  }
  if (!moved) return grad;
  const std::optional<ShardOrder> order =
      target == l->spec().placements() ? std::optional<ShardOrder>(l->spec().shard_order()) : std::nullopt;
  return Redistribute(grad, DTensorSpec(g->spec().mesh_ptr(), std::move(target), g->spec().shape(),
                                        g->spec().strides(), grad.dtype(), order));
}

const bool kInstalled = [] {
  SetDistributedHandler(&DispatchDistributed);
  SetImplicitReplicator(&ReplicateDenseInputs);
  autograd::SetLeafGradLayout(&LeafGradLayoutOf);
  return true;
}();
}  // namespace


}  // namespace tessel::dtensor
