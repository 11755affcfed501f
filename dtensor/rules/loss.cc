// dtensor/rules/loss.cc — sharding rules for core/ops/loss.cc: cross_entropy(logits [N, C] | [C], target)
// and cross_entropy_backward(grad, logits, target), including the vocab-sharded (loss parallel) form.
//
// Invariant: per mesh axis the loss can
//   * replicate everything;
//   * shard the batch (logits S(0), target S(0)): reduction "none" -> S(0); "sum" -> Partial(sum);
//     "mean" -> Partial(sum) of local sums divided by the GLOBAL number of non-ignored targets (one
//     all_reduce of a count over the batch axes), so uneven shards and ignore_index stay exact;
//   * shard the classes (logits S(-1), target Replicate) — loss parallel (PyTorch's
//     torch.distributed.tensor.parallel.loss_parallel): each rank sees a slice of the vocabulary; the
//     row max is all-reduced (max), then the sums of exp(x - max) and the target logits (zero on ranks
//     that do not hold the target's class) travel in ONE all_reduce (sum) of 2N values; the loss is
//     Replicate on those axes. Backward recomputes log-sum-exp with the same two collectives and
//     writes softmax - onehot on the local class slice: grad_logits stays S(-1), no gather of logits.
// Partial logits are reduced first (the loss is not linear).
//
// Example (loss parallel on "tp"):
//   CrossEntropy(logits_S1, target_R);     // [R] scalar: all_reduce(max) + all_reduce(sum), no gather
//   CrossEntropy(logits_S0, target_S0);    // data parallel: [P(sum)] (+ one count all_reduce for mean)
#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/loss_rows.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "dtensor/layout.h"
#include "dtensor/rules/rule_util.h"

namespace tessel::dtensor::rules {
namespace {

using comm::ReduceOp;

struct LossAxes {
  std::vector<int> vocab;  // axes sharding the class dim
  std::vector<int> batch;  // axes sharding the row dim
};

LossAxes AxesOf(const ShardingState& logits, int64_t ndim) {
  LossAxes axes;
  axes.vocab = AxesSharding(logits, ndim - 1);
  if (ndim == 2) axes.batch = AxesSharding(logits, 0);
  return axes;
}

void AllReduce(const LocalContext& ctx, const std::vector<int>& axes, const Tensor& t, ReduceOp op) {
  for (int a : axes) ctx.call.mesh.axis_group(a)->AllReduce(t, op)->Wait();
}

// Number of non-ignored targets over the whole batch (all-reduced over the batch axes).
double GlobalCount(const LocalContext& ctx, const Tensor& target, const std::vector<int>& batch) {
  const int64_t ignore = ctx.call.attrs.GetInt("ignore_index");
  double count = 0;
  for (double t : target.ToDoubleVector()) count += static_cast<int64_t>(t) != ignore;
  Tensor c = Full(std::span<const int64_t>(), count, DType::kFloat64, target.device());
  AllReduce(ctx, batch, c, ReduceOp::kSum);
  return c.item<double>();
}

// [Note: loss-parallel memory] The vocab-sharded loss reads the local logits in place (16-bit rows are
// widened one row at a time into a per-task buffer): backward's only [n, c] allocation is the gradient, in
// the logits' dtype, so its transient is the one planner/activations.h counts (logits + gradient).
//
// Arithmetic: the same as the unsharded kernel (core/ops/loss.cc) per local slice — the logits' compute type
// (float32 for float32/16-bit, float64 for float64) and Eigen's vectorized exp, rows in parallel on the
// calling thread's budget; only the per-row statistics that cross ranks (max, Σ exp, the target logit) are
// combined in float64.

// Rows per parallel task: about 32 Ki logits.
int64_t RowGrain(int64_t c) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(c, 1)); }

// `x` itself when contiguous, else a contiguous copy in its dtype.
Tensor ContiguousRows(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor c = Empty(x.sizes(), x.dtype(), x.device());
  CopyInto(c, x);
  return c;
}

// Row statistics of a vocab-sharded [n, c] slice: lse[r] over the full vocabulary and, when `target` is
// given, the target logit (zero for ignored rows). Two all_reduces over the vocab axes.
struct RowStats {
  std::vector<double> max, sum;  // row r's log-sum-exp is max + log(sum); its softmax exp(x - max) / sum
  std::vector<double> target_logit;
  double lse(size_t r) const { return max[r] + std::log(sum[r]); }
};

// Local pass 1 (pm: row maxima, -inf for an empty slice) and pass 2 (ps[r]: Σ exp(x - m[r]); ps[n + r]: the
// target logit when this slice holds the target's class) over the contiguous [n, c] slice x.
template <typename T>
void LocalRowMax(const T* x, int64_t n, int64_t c, double* pm) {
  if (c == 0) return;
  ParallelFor(0, n, RowGrain(c), [&](int64_t r0, int64_t r1) {
    RowArray<ComputeT<T>> buf;
    for (int64_t r = r0; r < r1; ++r) pm[r] = static_cast<double>(LoadRow(x + r * c, c, buf).maxCoeff());
  });
}
template <typename T>
void LocalRowSums(const T* x, int64_t n, int64_t c, const double* pm, const std::vector<int64_t>& target, int64_t c0,
                  double* ps) {
  using C = ComputeT<T>;
  if (c == 0) return;
  ParallelFor(0, n, RowGrain(c), [&](int64_t r0, int64_t r1) {
    RowArray<C> buf;
    for (int64_t r = r0; r < r1; ++r) {
      const auto row = LoadRow(x + r * c, c, buf);
      ps[r] = static_cast<double>((row - static_cast<C>(pm[r])).exp().sum());
      const int64_t local = target[static_cast<size_t>(r)] - c0;
      if (local >= 0 && local < c) ps[n + r] = static_cast<double>(row[local]);
    }
  });
}

RowStats VocabRowStats(const LocalContext& ctx, const Tensor& x, const std::vector<int64_t>& target, int64_t c0,
                       const std::vector<int>& vocab) {
  const int64_t n = static_cast<int64_t>(target.size()), c = x.numel() / std::max<int64_t>(n, 1);
  Tensor m = Full(Shape{n}, -std::numeric_limits<double>::infinity(), DType::kFloat64, x.device());
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), "cross_entropy",
                                 [&] { LocalRowMax(x.data_ptr<scalar_t>(), n, c, m.data_ptr<double>()); });
  AllReduce(ctx, vocab, m, ReduceOp::kMax);
  Tensor sums = Zeros(Shape{2 * n}, DType::kFloat64, x.device());
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), "cross_entropy", [&] {
    LocalRowSums(x.data_ptr<scalar_t>(), n, c, m.data_ptr<double>(), target, c0, sums.data_ptr<double>());
  });
  AllReduce(ctx, vocab, sums, ReduceOp::kSum);
  const double* pm = m.data_ptr<double>();
  const double* ps = sums.data_ptr<double>();
  RowStats st;
  for (int64_t r = 0; r < n; ++r) {
    st.max.push_back(pm[r]);
    st.sum.push_back(ps[r]);
    st.target_logit.push_back(ps[n + r]);
  }
  return st;
}

// grad rows of the local slice: (softmax - onehot) · scale[r], 0 for ignored rows.
template <typename T>
void LocalSoftmaxGrad(const T* x, T* out, int64_t n, int64_t c, int64_t c0, const std::vector<int64_t>& target,
                      int64_t ignore, const RowStats& st, const std::vector<double>& scale) {
  using C = ComputeT<T>;
  if (c == 0) return;
  ParallelFor(0, n, RowGrain(c), [&](int64_t r0, int64_t r1) {
    RowArray<C> buf, grad;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t target_r = target[static_cast<size_t>(r)];
      T* orow = out + r * c;
      if (target_r == ignore) {
        std::fill(orow, orow + c, FromCompute<T>(C(0)));
        continue;
      }
      const C s = static_cast<C>(scale[static_cast<size_t>(r)]);
      const auto i = static_cast<size_t>(r);
      const auto row = LoadRow(x + r * c, c, buf);
      SoftmaxGradRow(row, static_cast<C>(st.max[i]), static_cast<C>(1.0 / st.sum[i]), s, target_r - c0, orow, grad);
    }
  });
}

// The vocab-sharded loss computes its row statistics and gradient on the host (Eigen loops over the
// local logits); device logits fail here, before any host access to device memory.
void CheckHostLogits(const Tensor& logits, const char* op) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, logits.device().is_cpu(), op,
                    ": the vocab-sharded (loss parallel) form runs on the host; logits ", ShapeStr(logits.sizes()),
                    " on ", logits.device(), " are not supported yet (turn loss parallel off for device tensors)");
}

int64_t ClassOffset(const LocalContext& ctx, int logits_input) {
  const ShardingState& s = *ctx.strategy.inputs[static_cast<size_t>(logits_input)];
  const DTensorSpec& spec = ctx.call.spec(logits_input);
  return ComputeLocalShapeAndGlobalOffset(spec.shape(), ctx.call.mesh.shape(), s.placements, s.order,
                                          ctx.call.mesh.coordinate())
      .global_offset.back();
}

// The global shapes and dtypes the dense kernel checks (core/ops/loss.cc's CheckArgs), checked in the
// rule so every rank raises the same error before any collective: rows are read at the local logits'
// width, so a target of another length would be read with the wrong stride, not out of bounds.
void CheckTargetSpec(const OpCall& call, const char* op, int logits_input, int target_input) {
  const DTensorSpec& logits = call.spec(logits_input);
  const DTensorSpec& target = call.spec(target_input);
  TESSEL_CHECK(target.dtype() == DType::kInt64, op, ": target must be int64 class indices; call ", DescribeCall(call));
  if (logits.ndim() == 2) {
    TESSEL_CHECK(target.shape() == Shape{logits.shape()[0]}, op, ": logits ", ShapeStr(logits.shape()),
                 " need target of shape [", logits.shape()[0], "], got ", ShapeStr(target.shape()), "; call ",
                 DescribeCall(call));
  } else {
    TESSEL_CHECK(target.ndim() <= 1 && NumElements(target.shape()) == 1, op, ": logits ", ShapeStr(logits.shape()),
                 " need a target of shape [] or [1], got ", ShapeStr(target.shape()), "; call ", DescribeCall(call));
  }
}

// This rank's targets, each in [0, C) of the global class count or ignore_index, as the dense kernel
// requires (kOutOfRange). Sharded over the vocabulary a target no rank owns would otherwise count as a
// logit of 0 in the loss and drop the -1 from the gradient on every rank: a wrong objective, silently.
std::vector<int64_t> Targets(const LocalContext& ctx, const char* op, int logits_input, const Tensor& target) {
  const std::vector<int64_t> t = target.ToVector<int64_t>();
  const int64_t classes = ctx.call.spec(logits_input).shape().back();
  const int64_t ignore = ctx.attrs.GetInt("ignore_index");
  for (size_t i = 0; i < t.size(); ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, t[i] == ignore || (t[i] >= 0 && t[i] < classes), op, ": target ",
                      t[i], " (at local index ", i, ") is out of range for ", classes, " classes (logits ",
                      ShapeStr(ctx.call.spec(logits_input).shape()), " sharded over the vocabulary, ignore_index ",
                      ignore, ", rank ", ctx.call.mesh.global_rank(), ")");
  }
  return t;
}

TensorList CrossEntropyLocal(const LocalContext& ctx) {
  const Tensor& logits = ctx.locals[0];
  const Tensor& target = ctx.locals[1];
  const LossAxes axes = AxesOf(*ctx.strategy.inputs[0], ctx.call.spec(0).ndim());
  const std::string& red = ctx.attrs.GetString("reduction");
  if (axes.vocab.empty()) {  // batch-sharded mean: local sum / global count
    const Attrs a = Attrs(ctx.attrs).Set("reduction", "sum");
    const TensorList sum = DispatchLocal(ctx.call.op, ctx.locals, a);
    const double count = GlobalCount(ctx, target, axes.batch);
    return DispatchLocal(GetOp("mul_scalar"), sum, Attrs().Set("value", 1.0 / count));
  }
  CheckHostLogits(logits, "cross_entropy");
  const std::vector<int64_t> t = Targets(ctx, "cross_entropy", 0, target);
  const int64_t ignore = ctx.attrs.GetInt("ignore_index");
  const RowStats st = VocabRowStats(ctx, ContiguousRows(logits), t, ClassOffset(ctx, 0), axes.vocab);
  std::vector<double> loss(t.size(), 0.0);
  double total = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] != ignore) loss[r] = st.lse(r) - st.target_logit[r];
    total += loss[r];
  }
  if (red == "none") return {FromDoubles(loss, target.sizes(), logits.dtype())};
  if (red == "mean") total /= GlobalCount(ctx, target, axes.batch);
  return {FromDoubles({total}, Shape{}, logits.dtype())};
}

TensorList CrossEntropyBackwardLocal(const LocalContext& ctx) {
  const Tensor& grad = ctx.locals[0];
  const Tensor& logits = ctx.locals[1];
  const Tensor& target = ctx.locals[2];
  const LossAxes axes = AxesOf(*ctx.strategy.inputs[1], ctx.call.spec(1).ndim());
  const std::string& red = ctx.attrs.GetString("reduction");
  if (axes.vocab.empty()) {  // batch-sharded mean: the "sum" gradient scaled by 1 / global count
    const double count = std::max(GlobalCount(ctx, target, axes.batch), 1.0);
    const Tensor g[] = {grad};
    const Tensor scaled = DispatchLocal(GetOp("mul_scalar"), g, Attrs().Set("value", 1.0 / count))[0];
    const Tensor in[] = {scaled, logits, target};
    return DispatchLocal(ctx.call.op, in, Attrs(ctx.attrs).Set("reduction", "sum"));
  }
  CheckHostLogits(logits, "cross_entropy_backward");
  const std::vector<int64_t> t = Targets(ctx, "cross_entropy_backward", 1, target);
  const int64_t ignore = ctx.attrs.GetInt("ignore_index"), c0 = ClassOffset(ctx, 1);
  const Tensor x = ContiguousRows(logits);
  const RowStats st = VocabRowStats(ctx, x, t, c0, axes.vocab);
  const std::vector<double> g = grad.ToDoubleVector();
  double uniform = red == "none" ? 0.0 : g[0];
  if (red == "mean") uniform /= std::max(GlobalCount(ctx, target, axes.batch), 1.0);
  const int64_t n = static_cast<int64_t>(t.size()), c = x.numel() / std::max<int64_t>(n, 1);
  const std::vector<double> scale = red == "none" ? g : std::vector<double>(t.size(), uniform);
  Tensor out = Empty(logits.sizes(), logits.dtype(), logits.device());
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), "cross_entropy_backward", [&] {
    LocalSoftmaxGrad(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n, c, c0, t, ignore, st, scale);
  });
  return {out};
}

// Bytes the loss-parallel collectives move per vocab axis (max of N, sum of 2N doubles), and the count.
int64_t LossCommBytes(const OpCall& call, const Strategy& s, int logits_input) {
  const DTensorSpec& logits = call.spec(logits_input);
  const LossAxes axes = AxesOf(*s.inputs[static_cast<size_t>(logits_input)], logits.ndim());
  const int64_t rows = logits.ndim() == 2 ? logits.shape()[0] : 1;
  int64_t bytes = 0;
  for (int a : axes.vocab) bytes += 2 * 3 * rows * 8 * (call.mesh.size(a) - 1) / call.mesh.size(a);
  for (int a : axes.batch) bytes += 16 * (call.mesh.size(a) - 1) / call.mesh.size(a);
  return bytes;
}

std::vector<Strategy> Finish(const OpCall& call, std::vector<Strategy> out, int logits_input, LocalFn fn) {
  // Logits that are already vocab-sharded are never gathered, whatever the byte count says: avoiding a full
  // [N, V] on every rank is what loss parallelism is for (PyTorch's loss_parallel never gathers), and for a
  // tiny vocabulary the gather moves fewer bytes than the two all-reduces, so the cost model alone would.
  const int64_t ndim = call.spec(logits_input).ndim();
  const std::vector<int> sharded_now = AxesSharding(call.state(logits_input), ndim - 1);
  if (!sharded_now.empty()) {
    std::erase_if(out, [&](const Strategy& s) {
      return AxesSharding(*s.inputs[static_cast<size_t>(logits_input)], ndim - 1) != sharded_now;
    });
  }
  const bool mean = call.attrs.GetString("reduction") == "mean";
  for (Strategy& s : out) {
    const LossAxes axes = AxesOf(*s.inputs[static_cast<size_t>(logits_input)], call.spec(logits_input).ndim());
    if (!axes.vocab.empty() || (mean && !axes.batch.empty())) {
      s.local_fn = fn;
      s.extra_comm_bytes = LossCommBytes(call, s, logits_input);
    }
  }
  return out;
}

std::vector<Strategy> CrossEntropyRule(const OpCall& call) {
  const DTensorSpec& logits = call.spec(0);
  TESSEL_CHECK(logits.ndim() == 1 || logits.ndim() == 2, "cross_entropy: logits must be [N, C] or [C]; call ",
               DescribeCall(call));
  CheckTargetSpec(call, "cross_entropy", 0, 1);
  const bool none = call.attrs.GetString("reduction") == "none";
  const Shape out_shape = none ? call.spec(1).shape() : Shape{};
  const int64_t last = logits.ndim() - 1;
  const Placement r = Replicate{};
  std::vector<AxisOption> options = {{{r, r}, {r}, StrategyKind::kReplicate}};
  if (logits.ndim() == 2 && logits.shape()[0] > 1) {
    options.push_back({{Shard{0}, Shard{0}},
                       {none ? Placement(Shard{0}) : Placement(Partial{ReduceOp::kSum})},
                       none ? StrategyKind::kShard : StrategyKind::kContract});
  }
  if (logits.shape()[static_cast<size_t>(last)] > 1) options.push_back({{Shard{last}, r}, {r}, StrategyKind::kMasked});
  return Finish(call, CombineAxisOptions(call, options, {out_shape}), 0, CrossEntropyLocal);
}

std::vector<Strategy> CrossEntropyBackwardRule(const OpCall& call) {
  const DTensorSpec& logits = call.spec(1);
  CheckTargetSpec(call, "cross_entropy_backward", 1, 2);
  const bool none = call.attrs.GetString("reduction") == "none";
  const int64_t last = logits.ndim() - 1;
  const Placement r = Replicate{};
  std::vector<AxisOption> options = {{{r, r, r}, {r}, StrategyKind::kReplicate}};
  if (logits.ndim() == 2 && logits.shape()[0] > 1) {
    options.push_back({{none ? Placement(Shard{0}) : r, Shard{0}, Shard{0}}, {Shard{0}}, StrategyKind::kShard});
  }
  if (logits.shape()[static_cast<size_t>(last)] > 1) {
    options.push_back({{r, Shard{last}, r}, {Shard{last}}, StrategyKind::kMasked});
  }
  return Finish(call, CombineAxisOptions(call, options, {logits.shape()}), 1, CrossEntropyBackwardLocal);
}

const bool kRegistered = [] {
  RegisterShardingRule("cross_entropy", CrossEntropyRule);
  RegisterShardingRule("cross_entropy_backward", CrossEntropyBackwardRule);
  return true;
}();

}  // namespace
}  // namespace tessel::dtensor::rules
