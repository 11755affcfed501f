// dtensor/rules/rule_util.cc — the pointwise strategy generator and its linearity tables.
#include "dtensor/rules/rule_util.h"

#include <algorithm>
#include <limits>

#include "core/base/error.h"

namespace tessel::dtensor::rules {
namespace {

// Output first, then one entry per input (see Linearity in the header for the letters).
std::vector<std::string_view> Rows(Linearity lin, const OpCall& call) {
  switch (lin) {
    case Linearity::kNone:
      return {};
    case Linearity::kUnaryLinear:
      return {"SS", "AA"};
    case Linearity::kNeg:
      return {"SS", "AA", "NX", "XN"};
    case Linearity::kMonotone:
      return {"XX", "NN"};
    case Linearity::kAffine:
      return {"AA", "XX", "NN"};
    case Linearity::kCast:
      if (IsFloating(call.spec(0).dtype()) && IsFloating(call.attrs.GetDType("dtype"))) return {"SS", "AA", "XX", "NN"};
      return {};
    // PyTorch's additive rules; "SSS" also covers P(sum) + R by partitioning the Replicate operand
    // (exact in tessel: the value on axis coordinate 0, zeros elsewhere), which costs no communication.
    case Linearity::kAdditive:
      return {"SSS", "AAA", "AAR", "XXR", "NNR", "ARA"};
    case Linearity::kMul:
      return {"SSR", "AAR", "SRS", "ARA"};
    case Linearity::kDiv:
      return {"SSR", "AAR"};
    case Linearity::kGradLinear:
      if (call.num_inputs() == 2) return {"SSR", "AAR"};
      return {"SSRR", "AARR"};
    case Linearity::kAllPartial:
      return {"SS", "AA", "XX", "NN"};
    case Linearity::kCopy:
      return {"SSS", "AAA", "XXX", "NNN"};
  }
  return {};
}

Placement FromLetter(char c) {
  switch (c) {
    case 'S':
      return Partial{comm::ReduceOp::kSum};
    case 'A':
      return Partial{comm::ReduceOp::kAvg};
    case 'X':
      return Partial{comm::ReduceOp::kMax};
    case 'N':
      return Partial{comm::ReduceOp::kMin};
    default:
      return Replicate{};
  }
}

char LetterOf(const Placement& p) {
  const Partial* q = std::get_if<Partial>(&p);
  if (q == nullptr) return 'R';
  switch (q->reduce_op) {
    case comm::ReduceOp::kSum:
      return 'S';
    case comm::ReduceOp::kAvg:
      return 'A';
    case comm::ReduceOp::kMax:
      return 'X';
    case comm::ReduceOp::kMin:
      return 'N';
    default:
      return '?';
  }
}

// One candidate: every layout decision on every mesh axis follows input `lead`.
struct Follow {
  const OpCall& call;
  const Shape& out_shape;
  const std::vector<std::string_view>& rows;
  bool any_shard;  // AnyInputSharded(call), once per call

  int64_t Lead(int j) const {  // how many dims input j lacks on the left of the output
    return static_cast<int64_t>(out_shape.size()) - call.spec(j).ndim();
  }

  // Torch's choice for a Partial that must be reduced (no linearity row) on a mesh where some operand is
  // sharded (its single-dim expansion offers Shard only then): reduce-scatter it onto the lowest output dim
  // that no mesh axis right of `a` shards and that has a piece for every rank; -1 (all-reduce) when none.
  int64_t ScatterDim(int lead, const ShardingState& lead_state, int a) const {
    if (!any_shard) return -1;
    const int64_t lead_dims = call.spec(lead).ndim(), offset = Lead(lead);
    for (int64_t od = 0; od < static_cast<int64_t>(out_shape.size()); ++od) {
      const int64_t d = od - offset;
      const int64_t size = out_shape[static_cast<size_t>(od)];
      if (d < 0 || d >= lead_dims || call.spec(lead).shape()[static_cast<size_t>(d)] != size) continue;
      bool right = false;
      int64_t shards = call.mesh.size(a);
      for (int b = 0; b < call.mesh_ndim(); ++b) {
        if (!IsShardOn(lead_state.placements[static_cast<size_t>(b)], d)) continue;
        right = right || b > a;
        shards *= call.mesh.size(b);
      }
      if (!right && shards <= size) return od;
    }
    return -1;
  }

  // Axis `a` shards output dim `od`: every operand that carries that dim whole (not broadcast) shards it too.
  void ShardOperands(std::vector<std::vector<Placement>>& in, int a, int64_t od) const {
    for (int j = 0; j < call.num_inputs(); ++j) {
      if (!call.defined(j)) continue;
      const int64_t dj = od - Lead(j);
      if (dj >= 0 && call.spec(j).shape()[static_cast<size_t>(dj)] == out_shape[static_cast<size_t>(od)]) {
        in[static_cast<size_t>(j)][a] = Shard{dj};
      }
    }
  }

  Strategy Build(int lead) const {
    const int n = call.num_inputs(), mesh_ndim = call.mesh_ndim();
    const int64_t out_nd = static_cast<int64_t>(out_shape.size());
    std::vector<std::vector<Placement>> in(static_cast<size_t>(n), std::vector<Placement>(mesh_ndim, Replicate{}));
    std::vector<Placement> out(static_cast<size_t>(mesh_ndim), Replicate{});
    const ShardingState lead_state = call.state(lead);
    std::vector<std::pair<int64_t, int>> scattered;  // (output dim, mesh axis) of Partials reduce-scattered
    for (int a = 0; a < mesh_ndim; ++a) {
      const Placement& p = lead_state.placements[static_cast<size_t>(a)];
      if (const Shard* s = std::get_if<Shard>(&p)) {
        const int64_t od = s->dim + Lead(lead);
        if (call.spec(lead).shape()[static_cast<size_t>(s->dim)] != out_shape[static_cast<size_t>(od)]) continue;
        out[a] = Shard{od};
        ShardOperands(in, a, od);
      } else if (IsPartial(p)) {
        // The first row for the lead's op whose other Partial inputs keep their op or become Replicate (a
        // pending reduction cannot change its op: P(avg) + P(sum) takes "AAR", all-reducing the P(sum)
        // operand, where "AAA" alone left no legal candidate); else the first row for the lead's op.
        auto reachable = [&](std::string_view row) {
          for (int j = 0; j < n; ++j) {
            if (j == lead || !call.defined(j)) continue;
            const Placement q = call.spec(j).placement(a);
            const char want = row[static_cast<size_t>(1 + j)];
            if (IsPartial(q) && want != 'R' && want != LetterOf(q)) return false;
          }
          return true;
        };
        std::string_view chosen;
        for (int pass = 0; pass < 2 && chosen.empty(); ++pass) {
          for (std::string_view row : rows) {
            if (row[static_cast<size_t>(1 + lead)] != LetterOf(p) || (pass == 0 && !reachable(row))) continue;
            chosen = row;
            break;
          }
        }
        if (!chosen.empty()) {
          out[a] = FromLetter(chosen[0]);
          for (int j = 0; j < n; ++j) in[static_cast<size_t>(j)][a] = FromLetter(chosen[static_cast<size_t>(1 + j)]);
        } else if (const int64_t od = ScatterDim(lead, lead_state, a); od >= 0) {
          out[a] = Shard{od};
          scattered.emplace_back(od, a);
          ShardOperands(in, a, od);
        }
      }
    }
    Strategy st;
    // Orders: every sharded output dim keeps the lead input's nesting order of its axes.
    ShardingState out_state{out, ShardOrder(static_cast<size_t>(out_nd))};
    for (size_t d = 0; d < lead_state.order.size(); ++d) {
      for (int a : lead_state.order[d]) {
        if (IsShard(out[static_cast<size_t>(a)])) {
          out_state.order[static_cast<size_t>(std::get<Shard>(out[static_cast<size_t>(a)]).dim)].push_back(a);
        }
      }
    }
    // A reduce-scattered axis is the innermost of its dim (no axis right of it shards that dim).
    for (const auto& [od, a] : scattered) out_state.order[static_cast<size_t>(od)].push_back(a);
    for (int j = 0; j < n; ++j) {
      if (!call.defined(j)) {
        st.inputs.emplace_back();
        continue;
      }
      ShardingState sj{in[static_cast<size_t>(j)], ShardOrder(static_cast<size_t>(call.spec(j).ndim()))};
      for (int64_t od = 0; od < out_nd; ++od) {
        for (int a : out_state.order[static_cast<size_t>(od)]) {
          if (IsShardOn(sj.placements[static_cast<size_t>(a)], od - Lead(j))) {
            sj.order[static_cast<size_t>(od - Lead(j))].push_back(a);
          }
        }
      }
      st.inputs.emplace_back(std::move(sj));
    }
    st.outputs.emplace_back(OutputSpec{std::move(out_state), out_shape, {}});
    return st;
  }
};

bool SameLayouts(const Strategy& a, const Strategy& b) {
  return a.inputs == b.inputs && a.outputs[0]->state == b.outputs[0]->state;
}

}  // namespace

Shape BroadcastInputShapes(const OpCall& call) {
  Shape shape;
  bool first = true;
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) continue;
    shape = first ? call.spec(i).shape() : BroadcastShapes(shape, call.spec(i).shape(), call.op.name.c_str());
    first = false;
  }
  return shape;
}

namespace {

// The common case, decided without the candidate machinery (the dispatch overhead budget is a few
// microseconds): every defined input has input 0's shape and layout, and none is Partial.
bool AllInputsAgree(const OpCall& call) {
  if (!call.defined(0)) return false;
  const DTensorSpec& first = call.spec(0);
  if (first.has_partial()) return false;
  for (int i = 1; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) continue;
    const DTensorSpec& s = call.spec(i);
    if (s.shape() != first.shape() || s.placements() != first.placements() || s.shard_order() != first.shard_order()) {
      return false;
    }
  }
  return true;
}

// torch 2.15's single-dim pointwise strategies (_pointwise_ops.py, _common_pointwise_single_dim_strategy), in its
// order: everything Replicate; each output dim sharded, with every input that carries it whole (not broadcast)
// sharded there too, when some input is sharded (torch fills its Shard placeholders only then); the op's Partial
// rows.
std::vector<AxisOption> TorchPointwiseOptions(const OpCall& call, const Shape& out_shape,
                                              const std::vector<std::string_view>& rows) {
  const int n = call.num_inputs();
  const auto out_nd = static_cast<int64_t>(out_shape.size());
  std::vector<AxisOption> options;
  options.push_back({std::vector<Placement>(static_cast<size_t>(n), Replicate{}), {Replicate{}},
                     StrategyKind::kReplicate});
  if (AnyInputSharded(call)) {
    for (int64_t od = 0; od < out_nd; ++od) {
      AxisOption o{std::vector<Placement>(static_cast<size_t>(n), Replicate{}), {Shard{od}}, StrategyKind::kShard};
      for (int j = 0; j < n; ++j) {
        if (!call.defined(j)) continue;
        const int64_t dj = od - (out_nd - call.spec(j).ndim());
        if (dj >= 0 && call.spec(j).shape()[static_cast<size_t>(dj)] == out_shape[static_cast<size_t>(od)]) {
          o.inputs[static_cast<size_t>(j)] = Shard{dj};
        }
      }
      options.push_back(std::move(o));
    }
  }
  for (std::string_view row : rows) {
    if (row.size() != static_cast<size_t>(1 + n)) continue;
    AxisOption o{std::vector<Placement>(static_cast<size_t>(n), Replicate{}), {FromLetter(row[0])},
                 StrategyKind::kPartialLinear};
    for (int j = 0; j < n; ++j) o.inputs[static_cast<size_t>(j)] = FromLetter(row[static_cast<size_t>(1 + j)]);
    options.push_back(std::move(o));
  }
  return options;
}

// Where a pointwise candidate falls in PyTorch's strategy order: Partial outputs last, then by the sharded
// tensor dim of each mesh axis (a Replicate axis after every Shard).
std::vector<int64_t> TorchOrderKey(const Strategy& s) {
  std::vector<int64_t> key{0};
  if (s.outputs.empty() || !s.outputs[0]) return key;
  for (const Placement& p : s.outputs[0]->state.placements) {
    key[0] = key[0] || IsPartial(p);
    key.push_back(IsShard(p) ? std::get<Shard>(p).dim : std::numeric_limits<int64_t>::max());
  }
  return key;
}

}  // namespace

std::vector<Strategy> Pointwise(const OpCall& call, Linearity lin) {
  if (AllInputsAgree(call)) {
    std::vector<Strategy> out(1);
    const ShardingState state = call.state(0);
    for (int i = 0; i < call.num_inputs(); ++i) {
      out[0].inputs.push_back(call.defined(i) ? std::optional<ShardingState>(state) : std::nullopt);
    }
    out[0].outputs.emplace_back(OutputSpec{state, call.spec(0).shape(), {}});
    return out;
  }
  const Shape out_shape = BroadcastInputShapes(call);
  if (call.op.is_inplace) {
    TESSEL_CHECK(out_shape == call.spec(0).shape(), call.op.name, ": the operands broadcast to ", ShapeStr(out_shape),
                 ", not to the shape of the tensor written in place; call ", DescribeCall(call));
  }
  const std::vector<std::string_view> rows = Rows(lin, call);
  if (call.mesh_ndim() > 1 && !call.op.is_inplace && InputsInDefaultOrder(call)) {
    return ExpandAxisOptions(call, TorchPointwiseOptions(call, out_shape, rows), {out_shape});
  }
  const Follow follow{call, out_shape, rows, AnyInputSharded(call)};
  std::vector<Strategy> out;
  const int leads = call.op.is_inplace ? 1 : call.num_inputs();
  for (int i = 0; i < leads; ++i) {
    if (!call.defined(i)) continue;
    Strategy s = follow.Build(i);
    if (std::none_of(out.begin(), out.end(), [&](const Strategy& t) { return SameLayouts(s, t); })) {
      out.push_back(std::move(s));
    }
  }
  // Everything replicated, as every PyTorch pointwise op also offers: the way out when each operand's layout
  // would need another operand's Shard turned Partial (an implicit move PyTorch never makes, nor tessel).
  if (!call.op.is_inplace) {
    const std::vector<Placement> all_r(static_cast<size_t>(call.mesh_ndim()), Replicate{});
    auto replicated = [&](int64_t ndim) { return ShardingState{all_r, ShardOrder(static_cast<size_t>(ndim))}; };
    Strategy s;
    s.kind = StrategyKind::kReplicate;
    for (int i = 0; i < call.num_inputs(); ++i) {
      s.inputs.push_back(call.defined(i) ? std::make_optional(replicated(call.spec(i).ndim())) : std::nullopt);
    }
    s.outputs.emplace_back(OutputSpec{replicated(static_cast<int64_t>(out_shape.size())), out_shape, {}});
    if (std::none_of(out.begin(), out.end(), [&](const Strategy& t) { return SameLayouts(s, t); })) {
      out.push_back(std::move(s));
    }
  }
  // Candidates of equal cost resolve as PyTorch's do: its pointwise strategies list Shard(0), Shard(1), ...
  // of the output before any that keeps a Partial, and the first of equal cost wins. So a sharded output
  // comes before a Partial one (P(sum) + S(0): reduce-scatter the Partial, not partition the Shard), then the
  // lower sharded tensor dim, mesh axis by mesh axis (S(1) + S(0) gives S(0)); the rule's order after that.
  std::vector<std::pair<std::vector<int64_t>, size_t>> order;  // each key built once, not per comparison
  for (size_t k = 0; k < out.size(); ++k) order.emplace_back(TorchOrderKey(out[k]), k);
  std::sort(order.begin(), order.end());  // the index breaks ties: stable
  std::vector<Strategy> sorted;
  sorted.reserve(out.size());
  for (const auto& [key, k] : order) sorted.push_back(std::move(out[k]));
  return sorted;
}

std::vector<Strategy> One(std::vector<std::optional<ShardingState>> inputs,
                          std::vector<std::optional<OutputSpec>> outputs, StrategyKind kind) {
  std::vector<Strategy> out(1);
  out[0].inputs = std::move(inputs);
  out[0].outputs = std::move(outputs);
  out[0].kind = kind;
  return out;
}

namespace {

int KindWeight(StrategyKind k) {
  switch (k) {
    case StrategyKind::kMasked:
      return 5;
    case StrategyKind::kContract:
      return 4;
    case StrategyKind::kPartialLinear:
      return 3;
    case StrategyKind::kShard:
      return 2;
    case StrategyKind::kFollow:
      return 1;
    case StrategyKind::kReplicate:
      return 0;
  }
  return 0;
}

Strategy AssembleOptions(const OpCall& call, const std::vector<const AxisOption*>& choice,
                         const std::vector<std::optional<Shape>>& out_shapes) {
  Strategy s;
  s.kind = StrategyKind::kReplicate;
  for (const AxisOption* o : choice) {
    if (KindWeight(o->kind) > KindWeight(s.kind)) s.kind = o->kind;
  }
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) {
      s.inputs.emplace_back();
      continue;
    }
    std::vector<Placement> pl;
    for (const AxisOption* o : choice) pl.push_back(o->inputs[static_cast<size_t>(i)]);
    // Inputs and outputs in the default shard order: an axis option says which mesh axis shards which dim,
    // not how an input dim maps to an output dim, so a kept non-default order (fully_shard over tensor
    // parallelism gives [S(0), S(0)] ordered tp before dp) could be neither matched between inputs nor
    // carried to the output, whose blocks then landed in other ranks' places (embedding, attention and
    // cross-entropy returned permuted rows). An input in another order is moved to the default one.
    s.inputs.emplace_back(DefaultState(pl, call.spec(i).ndim()));
  }
  for (size_t k = 0; k < out_shapes.size(); ++k) {
    if (!out_shapes[k]) {
      s.outputs.emplace_back();
      continue;
    }
    std::vector<Placement> pl;
    for (const AxisOption* o : choice) pl.push_back(o->outputs[k]);
    s.outputs.emplace_back(
        OutputSpec{DefaultState(pl, static_cast<int64_t>(out_shapes[k]->size())), *out_shapes[k], {}});
  }
  return s;
}

}  // namespace

std::vector<Strategy> CombineAxisOptions(const OpCall& call, const std::vector<AxisOption>& options,
                                         const std::vector<std::optional<Shape>>& out_shapes) {
  std::vector<std::vector<const AxisOption*>> per_axis(static_cast<size_t>(call.mesh_ndim()));
  for (int a = 0; a < call.mesh_ndim(); ++a) {
    for (size_t k = 0; k < options.size(); ++k) {
      bool keep = k == 0;
      for (int i = 0; i < call.num_inputs() && !keep; ++i) {
        if (!call.defined(i)) continue;
        const Placement& cur = call.spec(i).placement(a);
        keep = !IsReplicate(cur) && options[k].inputs[static_cast<size_t>(i)] == cur;
      }
      if (keep) per_axis[static_cast<size_t>(a)].push_back(&options[k]);
    }
  }
  std::vector<Strategy> out;
  std::vector<size_t> idx(per_axis.size(), 0);
  while (true) {
    std::vector<const AxisOption*> choice;
    for (size_t a = 0; a < per_axis.size(); ++a) choice.push_back(per_axis[a][idx[a]]);
    out.push_back(AssembleOptions(call, choice, out_shapes));
    size_t a = 0;
    while (a < idx.size() && ++idx[a] == per_axis[a].size()) idx[a++] = 0;
    if (a == idx.size()) break;
  }
  return out;
}

namespace {

// Whether some input or output of `s` holds Partials of two reduce ops (sum with avg excepted): torch's
// expand_to_full_mesh_op_strategy drops such a candidate.
bool MixesPartials(const Strategy& s) {
  const auto mixes = [](const std::vector<Placement>& pl) {
    std::optional<comm::ReduceOp> first;
    for (const Placement& p : pl) {
      const Partial* q = std::get_if<Partial>(&p);
      if (q == nullptr) continue;
      if (!first) {
        first = q->reduce_op;
      } else if (*first != q->reduce_op) {
        const bool sum_avg = (*first == comm::ReduceOp::kSum || *first == comm::ReduceOp::kAvg) &&
                             (q->reduce_op == comm::ReduceOp::kSum || q->reduce_op == comm::ReduceOp::kAvg);
        if (!sum_avg) return true;
      }
    }
    return false;
  };
  for (const std::optional<ShardingState>& in : s.inputs) {
    if (in && mixes(in->placements)) return true;
  }
  for (const std::optional<OutputSpec>& out : s.outputs) {
    if (out && mixes(out->state.placements)) return true;
  }
  return false;
}

}  // namespace

bool InputsInDefaultOrder(const OpCall& call) {
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) continue;
    const DTensorSpec& spec = call.spec(i);
    if (spec.shard_order() != DefaultShardOrder(spec.placements(), spec.ndim())) return false;
  }
  return true;
}

bool AnyInputSharded(const OpCall& call) {
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) continue;
    const std::vector<Placement>& pl = call.spec(i).placements();
    if (std::any_of(pl.begin(), pl.end(), IsShard)) return true;
  }
  return false;
}

std::vector<Strategy> ShardExceptDim(const OpCall& call, int64_t dim,
                                     const std::vector<std::optional<Shape>>& out_shapes,
                                     const std::vector<comm::ReduceOp>& partials) {
  const size_t n = static_cast<size_t>(call.num_inputs()), outs = out_shapes.size();
  const auto every = [&](const Placement& p) {
    return AxisOption{std::vector<Placement>(n, p), std::vector<Placement>(outs, p)};
  };
  std::vector<AxisOption> options{every(Replicate{})};
  if (AnyInputSharded(call)) {
    const auto ndim = static_cast<int64_t>(out_shapes.empty() || !out_shapes[0] ? 0 : out_shapes[0]->size());
    for (int64_t d = 0; d < ndim; ++d) {
      if (d != dim) options.push_back(every(Shard{d}));
    }
  }
  for (comm::ReduceOp op : partials) options.push_back(every(Partial{op}));
  return ExpandAxisOptions(call, options, out_shapes);
}

std::vector<Strategy> ExpandAxisOptions(const OpCall& call, const std::vector<AxisOption>& options,
                                        const std::vector<std::optional<Shape>>& out_shapes) {
  const size_t axes = static_cast<size_t>(call.mesh_ndim());
  // Per axis, the options torch's cost model can reach: none that turns an input's Shard, or a Partial of
  // another op, into a Partial (an infinite cost there; the all-Replicate option always remains).
  std::vector<std::vector<const AxisOption*>> per_axis(axes);
  for (size_t a = 0; a < axes; ++a) {
    for (const AxisOption& o : options) {
      bool reachable = true;
      for (int i = 0; i < call.num_inputs() && reachable; ++i) {
        if (!call.defined(i)) continue;
        const Placement& cur = call.spec(i).placement(static_cast<int>(a));
        const Placement& want = o.inputs[static_cast<size_t>(i)];
        reachable = want == cur || !IsPartial(want) || IsReplicate(cur) || call.mesh.size(static_cast<int>(a)) == 1;
      }
      if (reachable) per_axis[a].push_back(&o);
    }
  }
  const auto candidate = [&](const std::vector<const AxisOption*>& choice) {
    Strategy s = AssembleOptions(call, choice, out_shapes);
    s.kind = StrategyKind::kFollow;
    s.torch_ties = true;  // equal costs go to the earlier candidate, as torch's selection
    return s;
  };
  // The candidate that moves no input, when every axis has an option its inputs already match: torch selects
  // it over every other (its cost is 0 and nothing is redistributed), so it is the only one listed.
  std::vector<const AxisOption*> unmoved;
  for (size_t a = 0; a < axes; ++a) {
    const auto same = [&](const AxisOption* o) {
      for (int i = 0; i < call.num_inputs(); ++i) {
        if (call.defined(i) && o->inputs[static_cast<size_t>(i)] != call.spec(i).placement(static_cast<int>(a))) {
          return false;
        }
      }
      return true;
    };
    const auto found = std::find_if(per_axis[a].begin(), per_axis[a].end(), same);
    if (found == per_axis[a].end()) break;
    unmoved.push_back(*found);
  }
  if (unmoved.size() == axes) {
    Strategy s = candidate(unmoved);
    bool current = !MixesPartials(s);
    for (int i = 0; i < call.num_inputs() && current; ++i) {
      current = !call.defined(i) || *s.inputs[static_cast<size_t>(i)] == call.state(i);
    }
    if (current) return {std::move(s)};
  }
  std::vector<Strategy> out;
  std::vector<size_t> idx(axes, 0);
  while (true) {
    std::vector<const AxisOption*> choice;
    for (size_t a = 0; a < axes; ++a) choice.push_back(per_axis[a][idx[a]]);
    Strategy s = candidate(choice);
    bool shardable = !MixesPartials(s);  // torch drops a spec mixing Partial ops (sum with avg excepted)
    // torch's is_tensor_shardable: no dim split over more ranks than it has elements
    for (int i = 0; i < call.num_inputs() && shardable; ++i) {
      if (!call.defined(i) || s.inputs[static_cast<size_t>(i)]->placements == call.spec(i).placements()) continue;
      for (int64_t d = 0; d < call.spec(i).ndim() && shardable; ++d) {
        const int64_t n = NumShards(*s.inputs[static_cast<size_t>(i)], d, call.mesh);
        shardable = n == 1 || n <= call.spec(i).shape()[d];
      }
    }
    if (shardable) out.push_back(std::move(s));
    size_t a = axes;  // the last mesh axis varies fastest (itertools.product)
    while (a > 0 && ++idx[a - 1] == per_axis[a - 1].size()) idx[--a] = 0;
    if (a == 0) break;
  }
  return out;
}

Attrs LocalShapeAttr(const LocalContext& ctx) {
  Attrs a = ctx.call.attrs;
  a.Set("shape", ctx.LocalOutputShape(0));
  return a;
}

Attrs LocalInputShapeAttr(const LocalContext& ctx) {
  Attrs a = ctx.call.attrs;
  a.Set("input_shape", ctx.LocalOutputShape(0));
  return a;
}

std::vector<char> ReducedMask(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<char> mask(static_cast<size_t>(ndim), dims.empty() ? 1 : 0);
  for (int64_t d : dims) {
    if (ndim == 0) continue;
    mask[static_cast<size_t>(NormalizeDim(d, ndim, op))] = 1;
  }
  return mask;
}

}  // namespace tessel::dtensor::rules
