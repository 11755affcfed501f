// dtensor/rules/matmul.cc — sharding rules for core/ops/matmul.cc: matmul (every attr form: operand
// promotion, transpose flags, squeeze_dims, sum_batch — see [Note: matmul attrs]) and linear.
//
// Invariant: the rule sees a product as labelled dims (PyTorch's einsum strategies in _matrix_ops.py):
// batch dims b (broadcast, or contracted under sum_batch), rows M of A, columns N of B, the contracted
// K. Per mesh axis the candidates are: everything Replicate; shard a batch dim (operands that broadcast
// it stay Replicate) → output Shard, or Partial(sum) when sum_batch contracts it; shard M (A only) or N
// (B only) → output Shard; shard K in both → Partial(sum); a Partial(sum/avg) operand times a Replicate
// one → Partial. Axes combine freely; only options an operand already matches are tried (plus
// Replicate), which always includes the zero-communication choice when one exists. linear(x, w, b) is
// the same with M = x's leading dims, N = w's rows (and b's), K = in_features; where the output is
// Partial(sum) the bias is partitioned (kept on axis coordinate 0, zeros elsewhere — exact, no comm),
// so Rowwise parallel adds the bias exactly once.
//
// Example (TP on a 1-D mesh "tp"):
//   Linear(x_R, w1_S0, b1_S0);    // Colwise: out [S(-1)], no communication
//   Linear(h_S1, w2_S1, b2_R);    // Rowwise: out [P(sum)], no communication (b2 partitioned)
//   Matmul(x_S0, w_R);            // batch/rows sharded: [S(0)]
#include <algorithm>

#include "core/base/error.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

using comm::ReduceOp;

// One labelled dim: the operand dims that carry it (-1: absent or broadcast) and the output dim (-1:
// contracted).
struct Label {
  std::vector<int64_t> operand_dims;
  int64_t out_dim = -1;
  int64_t size = 0;
  StrategyKind kind = StrategyKind::kShard;
};

// One choice on one mesh axis.
struct Option {
  std::vector<Placement> operands;
  Placement out;
  StrategyKind kind;
};

struct Product {
  std::vector<Label> labels;
  Shape out_shape;
  int num_operands = 0;
};

bool Has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Original dim of each resolved dim of an operand (-1 for an inserted size-1 dim), after matmul's
// promotion/insertion and transpose (core/ops/matmul.cc Resolve).
std::vector<int64_t> ResolvedDims(int64_t ndim, const std::vector<int64_t>& new_dims, bool transpose) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
  const bool rows = Has(new_dims, -2), cols = Has(new_dims, -1);
  if (cols) dims.push_back(-1);
  if (rows) {
    const size_t k = cols ? 2 : 1;
    dims.insert(dims.begin() + static_cast<int64_t>(dims.size() >= k ? dims.size() - k : 0), -1);
  }
  if (transpose && dims.size() >= 2) std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  return dims;
}

int64_t SizeOf(const DTensorSpec& s, int64_t d) { return d < 0 ? 1 : s.shape()[static_cast<size_t>(d)]; }

std::vector<int64_t> NewDims(const Attrs& a, const char* name, int64_t ndim, int64_t promoted) {
  if (a.Has(name)) return a.GetInts(name);
  return ndim == 1 ? std::vector<int64_t>{promoted} : std::vector<int64_t>{};
}

Product MatmulProduct(const OpCall& call) {
  const DTensorSpec& a = call.spec(0);
  const DTensorSpec& b = call.spec(1);
  const Attrs& at = call.attrs;
  const std::vector<int64_t> an = NewDims(at, "a_new_dims", a.ndim(), -2), bn = NewDims(at, "b_new_dims", b.ndim(), -1);
  std::vector<int64_t> squeeze;
  if (at.Has("squeeze_dims")) {
    squeeze = at.GetInts("squeeze_dims");
  } else {
    if (!at.Has("a_new_dims") && a.ndim() == 1) squeeze.push_back(-2);
    if (!at.Has("b_new_dims") && b.ndim() == 1) squeeze.push_back(-1);
  }
  const bool sum_batch = at.GetBool("sum_batch", false);
  const std::vector<int64_t> ra = ResolvedDims(a.ndim(), an, at.GetBool("transpose_a", false));
  const std::vector<int64_t> rb = ResolvedDims(b.ndim(), bn, at.GetBool("transpose_b", false));
  TESSEL_CHECK(ra.size() >= 2 && rb.size() >= 2, "matmul: both arguments need at least 1 dim; call ",
               DescribeCall(call));
  const int64_t na = static_cast<int64_t>(ra.size()), nb = static_cast<int64_t>(rb.size());
  const int64_t m = ra[na - 2], ka = ra[na - 1], kb = rb[nb - 2], n = rb[nb - 1];
  TESSEL_CHECK(SizeOf(a, ka) == SizeOf(b, kb), "matmul: inner dimensions do not match (", SizeOf(a, ka), " vs ",
               SizeOf(b, kb), "); call ", DescribeCall(call));
  const int64_t batch = std::max(na, nb) - 2;
  Product p;
  p.num_operands = 2;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t ia = i - (batch - (na - 2)), ib = i - (batch - (nb - 2));
    const int64_t da = ia >= 0 ? ra[static_cast<size_t>(ia)] : -1, db = ib >= 0 ? rb[static_cast<size_t>(ib)] : -1;
    const int64_t sa = SizeOf(a, da), sb = SizeOf(b, db);
    TESSEL_CHECK(sa == sb || sa == 1 || sb == 1, "matmul: batch dims do not broadcast; call ", DescribeCall(call));
    const int64_t size = std::max(sa, sb);
    Label l{{sa == size ? da : -1, sb == size ? db : -1},
            sum_batch ? -1 : i,
            size,
            sum_batch ? StrategyKind::kContract : StrategyKind::kShard};
    p.labels.push_back(l);
    if (!sum_batch) p.out_shape.push_back(size);
  }
  const int64_t base = static_cast<int64_t>(p.out_shape.size());
  const bool keep_m = !Has(squeeze, -2), keep_n = !Has(squeeze, -1);
  if (keep_m) p.out_shape.push_back(SizeOf(a, m));
  if (keep_n) p.out_shape.push_back(SizeOf(b, n));
  p.labels.push_back({{m, -1}, keep_m ? base : -1, SizeOf(a, m), StrategyKind::kShard});
  p.labels.push_back({{-1, n}, keep_n ? base + (keep_m ? 1 : 0) : -1, SizeOf(b, n), StrategyKind::kShard});
  p.labels.push_back({{ka, kb}, -1, SizeOf(a, ka), StrategyKind::kContract});
  return p;
}

// linear(x [..., in], w [out, in], b [out]?): operands x, w, b.
Product LinearProduct(const OpCall& call) {
  const DTensorSpec& x = call.spec(0);
  const DTensorSpec& w = call.spec(1);
  TESSEL_CHECK(w.ndim() == 2 && x.ndim() >= 1 && x.shape().back() == w.shape()[1], "linear: input ",
               ShapeStr(x.shape()), " does not match weight ", ShapeStr(w.shape()), "; call ", DescribeCall(call));
  Product p;
  p.num_operands = 3;
  const bool bias = call.defined(2);
  for (int64_t d = 0; d + 1 < x.ndim(); ++d) {
    p.labels.push_back({{d, -1, -1}, d, x.shape()[static_cast<size_t>(d)], StrategyKind::kShard});
    p.out_shape.push_back(x.shape()[static_cast<size_t>(d)]);
  }
  p.labels.push_back(
      {{-1, 0, bias ? 0 : -1}, static_cast<int64_t>(p.out_shape.size()), w.shape()[0], StrategyKind::kShard});
  p.out_shape.push_back(w.shape()[0]);
  p.labels.push_back({{x.ndim() - 1, 1, -1}, -1, w.shape()[1], StrategyKind::kContract});
  return p;
}

// The options of one mesh axis, pruned to those some operand already matches (plus all-Replicate).
std::vector<Option> AxisOptions(const OpCall& call, const Product& p, int axis, bool linear) {
  const int n = p.num_operands;
  std::vector<Option> all;
  all.push_back({std::vector<Placement>(n, Replicate{}), Replicate{}, StrategyKind::kReplicate});
  // torch's single-dim order (gen_single_dim_einsum_strategies): batch dims, then contracted, then free dims.
  std::vector<const Label*> ordered;
  for (const Label& l : p.labels) {
    if (l.out_dim >= 0 && l.operand_dims.size() > 1 && l.operand_dims[0] >= 0 && l.operand_dims[1] >= 0) {
      ordered.push_back(&l);
    }
  }
  for (const Label& l : p.labels) {
    if (l.out_dim < 0) ordered.push_back(&l);
  }
  for (const Label& l : p.labels) {
    if (std::find(ordered.begin(), ordered.end(), &l) == ordered.end()) ordered.push_back(&l);
  }
  for (const Label* lp : ordered) {
    const Label& l = *lp;
    if (l.size < 2) continue;
    Option o{std::vector<Placement>(n, Replicate{}), Replicate{}, l.kind};
    for (int i = 0; i < n; ++i) {
      if (l.operand_dims[static_cast<size_t>(i)] >= 0) o.operands[static_cast<size_t>(i)] = Shard{l.operand_dims[i]};
    }
    o.out = l.out_dim >= 0 ? Placement(Shard{l.out_dim}) : Placement(Partial{ReduceOp::kSum});
    if (linear && l.out_dim < 0) o.operands[2] = Partial{ReduceOp::kSum};  // the bias, partitioned
    all.push_back(std::move(o));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    for (int i = 0; i < 2; ++i) {
      Option o{std::vector<Placement>(n, Replicate{}), Partial{op}, StrategyKind::kPartialLinear};
      o.operands[static_cast<size_t>(i)] = Partial{op};
      if (linear) o.operands[2] = Partial{op};
      all.push_back(std::move(o));
    }
  }
  // Also kept, when some operand is sharded or Partial anywhere: an option every operand reaches for free on this
  // axis (it has it already, or is Replicate there: a local chunk or a partition). torch offers it like every
  // other, and it can win: in torch's step order its chunk runs before another operand's gather on an earlier
  // axis and halves what that gather sends (RedistributeMicros). With every operand replicated everywhere the
  // move-free all-Replicate candidate wins anyway, and those calls keep the short list.
  bool placed = false;
  for (int i = 0; i < n && !placed; ++i) {
    if (!call.defined(i)) continue;
    const std::vector<Placement>& pl = call.spec(i).placements();
    placed = !std::all_of(pl.begin(), pl.end(), IsReplicate);
  }
  std::vector<Option> kept;
  for (Option& o : all) {
    bool matches = o.kind == StrategyKind::kReplicate, free = placed;
    for (int i = 0; i < n && !matches; ++i) {
      if (!call.defined(i)) continue;
      const Placement& cur = call.spec(i).placement(axis);
      matches = !IsReplicate(cur) && o.operands[static_cast<size_t>(i)] == cur;
      free = free && (IsReplicate(cur) || o.operands[static_cast<size_t>(i)] == cur);
    }
    if (matches || free) kept.push_back(std::move(o));
  }
  return kept;
}

// Orders: an operand whose placements do not change keeps its own order; output dims take it over.
Strategy Assemble(const OpCall& call, const Product& p, const std::vector<const Option*>& choice) {
  Strategy s;
  s.torch_ties = true;
  int64_t contract = 0, partial = 0, shard = 0;
  std::vector<Placement> out;
  for (const Option* o : choice) {
    out.push_back(o->out);
    contract += o->kind == StrategyKind::kContract;
    partial += o->kind == StrategyKind::kPartialLinear;
    shard += o->kind == StrategyKind::kShard;
  }
  s.kind = contract  ? StrategyKind::kContract
           : partial ? StrategyKind::kPartialLinear
           : shard   ? StrategyKind::kShard
                     : StrategyKind::kReplicate;
  ShardingState out_state = DefaultState(out, static_cast<int64_t>(p.out_shape.size()));
  std::vector<ShardingState> states(static_cast<size_t>(call.num_inputs()));
  std::vector<bool> kept(states.size(), false);
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) continue;
    std::vector<Placement> pl;
    for (const Option* o : choice) pl.push_back(o->operands[static_cast<size_t>(i)]);
    states[static_cast<size_t>(i)] = DefaultState(pl, call.spec(i).ndim());
    kept[static_cast<size_t>(i)] = pl == call.spec(i).placements();
  }
  // One shard order per label, on every operand that carries it and on the output: the order of the
  // first operand that keeps its placements (it then moves nothing). Operands chunked in different
  // orders along a shared label would multiply mismatched blocks (a contracted K: a wrong Partial sum).
  for (const Label& l : p.labels) {
    const std::vector<int>* chosen = nullptr;
    for (int i = 0; i < call.num_inputs() && chosen == nullptr; ++i) {
      const int64_t d = l.operand_dims[static_cast<size_t>(i)];
      if (d < 0 || !kept[static_cast<size_t>(i)]) continue;
      const std::vector<int>& cur = call.spec(i).shard_order()[static_cast<size_t>(d)];
      if (!cur.empty()) chosen = &cur;
    }
    if (chosen == nullptr) continue;
    const auto same_axes = [&](const std::vector<int>& order) {
      return std::is_permutation(order.begin(), order.end(), chosen->begin(), chosen->end());
    };
    for (int i = 0; i < call.num_inputs(); ++i) {
      const int64_t d = l.operand_dims[static_cast<size_t>(i)];
      if (d < 0 || !call.defined(i)) continue;
      std::vector<int>& order = states[static_cast<size_t>(i)].order[static_cast<size_t>(d)];
      if (same_axes(order)) order = *chosen;
    }
    if (l.out_dim >= 0) {
      std::vector<int>& order = out_state.order[static_cast<size_t>(l.out_dim)];
      if (same_axes(order)) order = *chosen;
    }
  }
  for (int i = 0; i < call.num_inputs(); ++i) {
    if (!call.defined(i)) {
      s.inputs.emplace_back();
    } else {
      s.inputs.emplace_back(std::move(states[static_cast<size_t>(i)]));
    }
  }
  s.outputs.emplace_back(OutputSpec{std::move(out_state), p.out_shape, {}});
  return s;
}

std::vector<Strategy> Enumerate(const OpCall& call, const Product& p, bool linear) {
  std::vector<std::vector<Option>> per_axis;
  for (int a = 0; a < call.mesh_ndim(); ++a) per_axis.push_back(AxisOptions(call, p, a, linear));
  std::vector<Strategy> out;
  std::vector<size_t> idx(per_axis.size(), 0);
  while (true) {
    std::vector<const Option*> choice;
    for (size_t a = 0; a < per_axis.size(); ++a) choice.push_back(&per_axis[a][idx[a]]);
    out.push_back(Assemble(call, p, choice));
    // mesh axis 0 outermost, as itertools.product over torch's per-axis lists (the first of equal cost wins)
    size_t a = idx.size();
    while (a > 0 && ++idx[a - 1] == per_axis[a - 1].size()) idx[--a] = 0;
    if (a == 0) break;
  }
  return out;
}

std::vector<Strategy> MatmulRule(const OpCall& call) { return Enumerate(call, MatmulProduct(call), false); }
std::vector<Strategy> LinearRule(const OpCall& call) { return Enumerate(call, LinearProduct(call), true); }

const bool kRegistered = [] {
  RegisterShardingRule("matmul", MatmulRule);
  RegisterShardingRule("linear", LinearRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
