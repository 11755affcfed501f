// core/ops/loss.cc — cross_entropy (fused log_softmax + nll over the class dim): CPU kernels and backward.
//
// Ops registered:
//   cross_entropy(logits [N, C] | [C], target int64 [N] | [] | [1]) {ignore_index, reduction}
//       → loss: [] for "mean"/"sum", target's shape for "none"; logits' dtype
//   cross_entropy_backward(grad, logits, target) {ignore_index, reduction} → grad_logits
//       grad_logits[i] = (softmax(logits[i]) - onehot(target[i])) * scale_i, zero rows for ignored
//       targets; scale_i = grad ("sum"), grad / num_valid ("mean"), grad[i] ("none").
// Semantics follow torch.nn.functional.cross_entropy: "mean" divides by the number of targets that are
// not ignore_index, so a batch whose targets are all ignored has a NaN mean loss (and zero gradient).
//
// Invariant: every row is computed in fp32 (fp64 for float64 logits) as logsumexp(row) - row[target]
// with the max subtracted first, so large logits never overflow; rows run in parallel and the
// reduction over rows is a fixed-order double sum, so the loss is bitwise independent of the thread
// count. A target outside [0, C) that is not ignore_index raises kOutOfRange before any work.
//
// Example:
//   Tensor loss = CrossEntropy(logits_NV, targets_N);          // scalar, mean over non-ignored targets
//   Backward(loss);                                            // one cross_entropy_backward call
#include "core/ops/loss.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd/autocast.h"
#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss_rows.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kGrainElements = 1 << 14;

enum class Reduction { kMean, kSum, kNone };

Reduction ParseReduction(const std::string& s, const char* op) {
  if (s == "mean") return Reduction::kMean;
  if (s == "sum") return Reduction::kSum;
  TESSEL_CHECK(s == "none", op, ": reduction must be \"mean\", \"sum\" or \"none\", got \"", s, "\"");
  return Reduction::kNone;
}

// Problem size of one call, after the shape checks.
struct Dims {
  int64_t rows = 0;     // N (1 for 1-D logits)
  int64_t classes = 0;  // C
};

// Rows per parallel task.
int64_t RowGrain(const Dims& d) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(d.classes, 1)); }

// Checks logits/target shapes and dtypes and every target value (kOutOfRange when a target is neither
// in [0, C) nor ignore_index). Serial and before any parallel work, so the error is thrown cleanly.
Dims CheckArgs(const char* op, std::span<const Tensor> in, const Tensor& logits, const Tensor& target,
               int64_t ignore_index) {
  TESSEL_CHECK(logits.defined() && target.defined(), op, ": logits and target are required, got ", DescribeInputs(in));
  TESSEL_CHECK(IsFloating(logits.dtype()), op, ": logits must be floating, got ", DescribeInputs(in));
  TESSEL_CHECK(target.dtype() == DType::kInt64, op, ": target must be int64 class indices, got ", DescribeInputs(in));
  Dims d;
  if (logits.dim() == 2) {
    d = {logits.size(0), logits.size(1)};
    TESSEL_CHECK(target.sizes() == Shape{d.rows}, op, ": logits ", ShapeStr(logits.sizes()), " need target of shape [",
                 d.rows, "], got ", ShapeStr(target.sizes()));
  } else {
    TESSEL_CHECK(logits.dim() == 1, op, ": logits must be [N, C] or [C], got ", ShapeStr(logits.sizes()));
    d = {1, logits.size(0)};
    TESSEL_CHECK(target.numel() == 1 && target.dim() <= 1, op, ": logits ", ShapeStr(logits.sizes()),
                 " need a target of shape [] or [1], got ", ShapeStr(target.sizes()));
  }
  const Tensor t = DenseOrCopy(target);
  const int64_t* pt = static_cast<const int64_t*>(t.raw_data());
  for (int64_t i = 0; i < d.rows; ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, pt[i] == ignore_index || (pt[i] >= 0 && pt[i] < d.classes), "Target ",
                      pt[i], " is out of bounds. (", op, ": target ", pt[i], " at index ", i, " is out of range for ",
                      d.classes, " classes; logits ", ShapeStr(logits.sizes()), ", ignore_index ", ignore_index, ")");
  }
  return d;
}

// -log softmax(row)[t] = (m - row[t]) + log Σ exp(row - m), m the row's max: the target's logit leaves the max
// before the sum's log joins (m + log Σ - row[t] rounded m in first: logits near 1e4 lost three digits, and a
// confident row's 2e-6 loss came out 0).
// The sum's log is log1p of the other entries' terms (the max's own is exactly 1): log(1 + 2e-6) in float32
// is quantized to 6%.
template <typename C>
C RowNll(const Eigen::Map<const RowArray<C>>& row, int64_t t) {
  Eigen::Index arg = 0;
  const C m = row.maxCoeff(&arg);
  // An infinite max (+inf, or a row of -inf) makes torch's log-softmax NaN: so is the loss (m - x[t] read inf).
  if (!std::isfinite(m)) return std::numeric_limits<C>::quiet_NaN();
  const Eigen::Index n = row.size();
  const C rest = (row.head(arg) - m).exp().sum() + (row.tail(n - arg - 1) - m).exp().sum();
  return (m - row[t]) + std::log1p(rest);
}

// 16-bit logits, as torch's CPU log_softmax + nll_loss compute them (a float32 fused kernel rounded once differed
// in a bf16 ulp of the printed loss: 4.84375 for torch's 4.875): log_softmax stores the row's sum of exponentials
// and its log in the logits' dtype, so row entry j is y_j = R((x_j - m) - R(log(R(Σ exp(x - m))))), R rounding to
// the dtype; nll's mean is R(-Σ y_t / valid); its gradient -R(g / valid) at the target, and log_softmax's backward
// R(g_j - exp(y_j) · Σ g) with Σ g that one entry. Lse16 is the row's R(log(R(Σ))), with its max.
template <typename T, typename C>
std::pair<C, C> Lse16(const Eigen::Map<const RowArray<C>>& row, bool float_lse) {
  const C m = row.maxCoeff();
  const C sum = (row - m).exp().sum();
  if (float_lse) return {m, std::log(sum)};  // torch's log_softmax along a dim other than the last
  return {m, RoundedTo<T>(std::log(RoundedTo<T>(sum)))};
}

// The 16-bit "sum" / "mean" of the rows' losses as torch's CPU nll_loss adds them: in the dtype, every add rounded,
// through 8 levels of partial sums (a row's loss joins level 0; at a row index whose low `p` bits are 0, level j
// folds into level j + 1 while the next p bits are 0 too; p = max(4, ceil(log2 rows) / 8)), the levels then added
// in order, and "mean" divided by the valid rows' count in the dtype. Rounding after each add this way moves the
// loss by bf16 ulps from the float32 sum: a seeded 32-row batch's mean reads torch's 6.0, not 5.9375.
template <typename T, typename C>
C CascadeSum16(const std::vector<C>& per_row, const int64_t* target, int64_t ignore_index, Reduction red) {
  constexpr int kLevels = 8;
  const int64_t rows = static_cast<int64_t>(per_row.size());
  int ceil_log2 = 0;
  while ((int64_t{1} << ceil_log2) < rows) ++ceil_log2;
  const int p = std::max(4, ceil_log2 / kLevels);
  const int64_t mask0 = (int64_t{1} << p) - 1;
  C level[kLevels] = {};
  int64_t valid = 0;
  for (int64_t b = 0; b < rows; ++b) {
    if (target[b] == ignore_index) continue;
    ++valid;
    level[0] = RoundedTo<T>(level[0] + per_row[b]);  // per_row holds -log p(target)
    for (int j = 0; j + 1 < kLevels; ++j) {
      if ((b & (mask0 << (j * p))) != 0) break;
      level[j + 1] = RoundedTo<T>(level[j + 1] + level[j]);
      level[j] = 0;
    }
  }
  C total = 0;
  for (C v : level) total = RoundedTo<T>(total + v);
  if (red == Reduction::kMean) total = RoundedTo<T>(total / RoundedTo<T>(static_cast<C>(valid)));  // 0 / 0: NaN
  return total;
}

// ---- forward --------------------------------------------------------------------------------------

template <typename T>
Tensor ForwardTyped(const Tensor& logits, const Tensor& target, Dims d, int64_t ignore_index, Reduction red,
                    bool float_lse) {
  using C = ComputeT<T>;
  const T* px = static_cast<const T*>(logits.raw_data());
  const int64_t* pt = static_cast<const int64_t*>(target.raw_data());
  std::vector<C> per_row(d.rows, C(0));  // 0 for ignored rows, like torch's reduction="none"
  ParallelFor(0, d.rows, RowGrain(d), [&](int64_t r0, int64_t r1) {
    RowArray<C> buf;
    for (int64_t r = r0; r < r1; ++r) {
      if (pt[r] == ignore_index) continue;
      const auto row = LoadRow(px + r * d.classes, d.classes, buf);
      if constexpr (kIsSixteenBitFloat<T>) {
        const auto [m, lse] = Lse16<T, C>(row, float_lse);
        per_row[r] = std::isfinite(m) ? -RoundedTo<T>((row[pt[r]] - m) - lse) : std::numeric_limits<C>::quiet_NaN();
      } else {
        per_row[r] = RowNll<C>(row, pt[r]);
      }
    }
  });
  if (red == Reduction::kNone) {
    Tensor out = Empty(target.sizes(), logits.dtype(), logits.device());
    T* po = static_cast<T*>(out.raw_data());
    for (int64_t r = 0; r < d.rows; ++r) po[r] = FromCompute<T>(per_row[r]);
    return out;
  }
  if constexpr (kIsSixteenBitFloat<T>) {
    return Full(std::span<const int64_t>(), static_cast<double>(CascadeSum16<T>(per_row, pt, ignore_index, red)),
                logits.dtype(), logits.device());
  }
  double total = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < d.rows; ++r) {
    total += static_cast<double>(per_row[r]);
    valid += pt[r] != ignore_index;
  }
  if (red == Reduction::kMean) total /= static_cast<double>(valid);  // 0 / 0 = NaN, like torch
  return Full(std::span<const int64_t>(), total, logits.dtype(), logits.device());
}

TensorList ForwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const Reduction red = ParseReduction(attrs.GetString("reduction"), "cross_entropy");
  const Dims d = CheckArgs("cross_entropy", in, in[0], in[1], ignore_index);
  const Tensor logits = DenseOrCopy(in[0]);
  const Tensor target = DenseOrCopy(in[1]);
  Tensor out;
  const bool float_lse = attrs.GetBool("float_lse", false);
  TESSEL_DISPATCH_FLOATING_TYPES(logits.dtype(), "cross_entropy", [&] {
    out = ForwardTyped<scalar_t>(logits, target, d, ignore_index, red, float_lse);
  });
  return {out};
}

// ---- fused backward -------------------------------------------------------------------------------

template <typename T>
Tensor BackwardTyped(const Tensor& grad, const Tensor& logits, const Tensor& target, Dims d, int64_t ignore_index,
                     Reduction red, bool float_lse) {
  using C = ComputeT<T>;
  const T* px = static_cast<const T*>(logits.raw_data());
  const T* pg = static_cast<const T*>(grad.raw_data());
  const int64_t* pt = static_cast<const int64_t*>(target.raw_data());
  C uniform = 0;  // the scale of every valid row for "mean" / "sum"
  if (red != Reduction::kNone) {
    int64_t valid = 0;
    for (int64_t r = 0; r < d.rows; ++r) valid += pt[r] != ignore_index;
    uniform = static_cast<C>(ToCompute(pg[0]));
    // (a 16-bit count is rounded to the dtype first, as torch's total_weight: 257 valid rows divide by 256)
    if (red == Reduction::kMean) uniform /= RoundedTo<T>(static_cast<C>(std::max<int64_t>(valid, 1)));
  }
  Tensor out = Empty(logits.sizes(), logits.dtype(), logits.device());
  T* po = static_cast<T*>(out.raw_data());
  ParallelFor(0, d.rows, RowGrain(d), [&](int64_t r0, int64_t r1) {
    RowArray<C> buf, grad_row;
    for (int64_t r = r0; r < r1; ++r) {
      T* orow = po + r * d.classes;
      if (pt[r] == ignore_index) {
        std::fill(orow, orow + d.classes, FromCompute<T>(C(0)));
        continue;
      }
      const C scale = red == Reduction::kNone ? static_cast<C>(ToCompute(pg[r])) : uniform;
      const auto row = LoadRow(px + r * d.classes, d.classes, buf);
      if constexpr (kIsSixteenBitFloat<T>) {
        if (row.size() > 0) {
          const auto [m, lse] = Lse16<T, C>(row, float_lse);
          const C g = -RoundedTo<T>(scale);  // nll's gradient at the target, in the logits' dtype
          for (int64_t j = 0; j < d.classes; ++j) {
            const C e = std::exp(RoundedTo<T>((row[j] - m) - lse));
            orow[j] = FromCompute<T>((j == pt[r] ? g : C(0)) - e * g);
          }
        }
        continue;
      }
      const C m = row.size() == 0 ? C(0) : row.maxCoeff();
      SoftmaxGradRow(row, m, C(1) / (row - m).exp().sum(), scale, pt[r], orow, grad_row);
    }
  });
  return out;
}

TensorList BackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "cross_entropy_backward";
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const Reduction red = ParseReduction(attrs.GetString("reduction"), op);
  const Dims d = CheckArgs(op, in, in[1], in[2], ignore_index);
  const Shape want = red == Reduction::kNone ? in[2].sizes() : Shape{};
  TESSEL_CHECK(in[0].defined() && in[0].sizes() == want && in[0].dtype() == in[1].dtype(), op,
               ": grad must have shape ", ShapeStr(want), " and the logits' dtype, got ", DescribeInputs(in));
  const Tensor grad = DenseOrCopy(in[0]);
  const Tensor logits = DenseOrCopy(in[1]);
  const Tensor target = DenseOrCopy(in[2]);
  Tensor out;
  const bool float_lse = attrs.GetBool("float_lse", false);
  TESSEL_DISPATCH_FLOATING_TYPES(logits.dtype(), op, [&] {
    out = BackwardTyped<scalar_t>(grad, logits, target, d, ignore_index, red, float_lse);
  });
  return {out};
}

// Double backward (create_graph). With p = softmax(logits) and w_i the row's factor (0 for an ignored
// target; g_i for "none", g for "sum", g / valid rows for "mean"), cross_entropy_backward is
// w_i (p_i - onehot_i): linear in g, so its gradient in g sums gg times the op at g = 1; in the logits it
// is w_i softmax_backward(gg_i, p_i) = w_i p_i (gg_i - sum(gg_i p_i)).
TensorList CrossEntropyDoubleBackward(const BackwardContext& c);

const OpDef& kCrossEntropyBackward = RegisterOp({.name = "cross_entropy_backward",
                                                 .cpu = BackwardKernel,
                                                 .backward = CrossEntropyDoubleBackward});

TensorList CrossEntropyDoubleBackward(const BackwardContext& c) {
  const Tensor &g = c.inputs[0], &logits = c.inputs[1], &target = c.inputs[2], &gg = c.grad_outputs[0];
  const Reduction red = ParseReduction(c.attrs.GetString("reduction"), "cross_entropy_backward");
  const DType dt = logits.dtype();
  Tensor dg, dlogits;
  if (c.needs_input_grad[0]) {
    const Tensor unit = autograd::CallOp1(kCrossEntropyBackward, {OnesLike(g), logits, target}, c.attrs);
    dg = red == Reduction::kNone ? Sum(Mul(gg, unit), {-1}) : Sum(Mul(gg, unit));
  }
  if (c.needs_input_grad[1]) {
    const Tensor ignored = Eq(target, Scalar(static_cast<double>(c.attrs.GetInt("ignore_index")), target.dtype(),
                                             target.device()));
    const Tensor valid = Where(ignored, Scalar(0.0, dt, logits.device()), Scalar(1.0, dt, logits.device()));
    Tensor w = Mul(valid, g);  // "none": per row; "sum" / "mean": g broadcast over the rows
    if (red == Reduction::kMean) w = Div(w, Sum(valid));
    const Tensor p = Softmax(logits, -1);
    const Tensor d = Mul(p, Sub(gg, Sum(Mul(gg, p), {-1}, /*keepdim=*/true)));
    dlogits = Mul(d, logits.dim() == 1 ? w : Unsqueeze(w, -1));
  }
  return {dg, dlogits, Tensor()};
}

TensorList CrossEntropyBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined() || !c.needs_input_grad[0]) return {Tensor(), Tensor()};
  return {autograd::CallOp1(kCrossEntropyBackward, {g, c.inputs[0], c.inputs[1]}, c.attrs), Tensor()};
}

const OpDef& kCrossEntropy =
    RegisterOp({.name = "cross_entropy", .cpu = ForwardKernel, .backward = CrossEntropyBackward});

}  // namespace

Tensor CrossEntropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, const std::string& reduction,
                    bool rows_of_class_dim_1) {
  ParseReduction(reduction, "cross_entropy");
  Attrs attrs = Attrs().Set("ignore_index", ignore_index).Set("reduction", reduction);
  if (rows_of_class_dim_1) attrs.Set("float_lse", true);
  return autograd::CallOp1(kCrossEntropy, {logits, target}, attrs);
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, const std::string& reduction,
                    double label_smoothing, bool rows_of_class_dim_1) {
  TESSEL_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
               "cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  if (label_smoothing == 0.0) return CrossEntropy(logits, target, ignore_index, reduction, rows_of_class_dim_1);
  const Reduction red = ParseReduction(reduction, "cross_entropy");
  // Under autocast cross-entropy runs in float32 (torch's list): the smoothing term too, so both parts agree.
  const Tensor lg = AutocastEnabled() && logits.dtype() != DType::kFloat32 && logits.dtype() != DType::kFloat64
                         ? Cast(logits, DType::kFloat32)
                         : logits;
  const Tensor nll = CrossEntropy(lg, target, ignore_index, "none");  // 0 at ignored rows
  TESSEL_CHECK(lg.dim() >= 1, "cross_entropy: logits must have a class dim, got ", ShapeStr(lg.sizes()));
  const DType dt = lg.dtype();
  const Tensor zero = Scalar(0.0, dt, lg.device()), one = Scalar(1.0, dt, lg.device());
  const Tensor ignored = Eq(target, Scalar(static_cast<double>(ignore_index), target.dtype(), target.device()));
  const Tensor uniform = Where(ignored, zero, MulScalar(Mean(LogSoftmax(lg, -1), {-1}), -1.0));
  const Tensor per_row = Add(MulScalar(nll, 1.0 - label_smoothing), MulScalar(uniform, label_smoothing));
  if (red == Reduction::kNone) return per_row;
  if (red == Reduction::kSum) return Sum(per_row);
  return Div(Sum(per_row), Sum(Where(ignored, zero, one)));
}

}  // namespace tessel
