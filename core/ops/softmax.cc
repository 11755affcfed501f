// core/ops/softmax.cc — "softmax" and "log_softmax" along one dim, with the fused backward ops
// "softmax_backward"(grad, out; dim) and "log_softmax_backward"(grad, out; dim).
//
// Invariant: each lane (the values along `dim` at one index of the other dims) is normalized on its own,
// max-subtracted in ComputeT (fp32 for 16-bit floats) and rounded once on store (16-bit log_softmax along the last
// dim also rounds its log-sum-exp's sum and log, as torch's), so no finite input
// overflows; a lane holding NaN gives NaN, a lane of all -inf gives NaN (as torch). The input is seen as
// row-major [A, N, K] with N = size(dim): K == 1 (dim last, contiguous) runs on the rows in place with
// Eigen's vectorized exp, in parallel over rows; K > 1 gathers each lane into a per-thread buffer first.
// Backward (both save only the output): softmax dx = y * (g - sum(g * y)); log_softmax dx = g - exp(y) * sum(g).
//
// Example:
//   Tensor p_BTV = Softmax(logits_BTV, -1);
//   Tensor lp_BV = LogSoftmax(logits_BV, 1);
#include "core/ops/softmax.h"

#include <Eigen/Core>
#include <array>
#include <cmath>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/exact_math.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task

template <typename C>
using ArrayMap = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;
template <typename C>
using ConstArrayMap = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;

// y = softmax(x) or log_softmax(x) of one lane of n > 0 values. round (log_softmax along the last dim of 16-bit
// data, T): the sum of exponentials and its log are rounded to T, as torch's CPU kernel keeps them in T.
template <bool kLog, typename C, typename T = C>
void SoftmaxLane(const C* xp, C* yp, int64_t n, bool round = false) {
  ConstArrayMap<C> x(xp, n);
  ArrayMap<C> y(yp, n);
  const C mx = x.template maxCoeff<Eigen::PropagateNaN>();
  if constexpr (kLog) {
    C sum = (x - mx).exp().sum();
    if (round) sum = RoundedTo<T>(sum);
    C lse = std::log(sum);
    if (round) lse = RoundedTo<T>(lse);
    y = (x - mx) - lse;
  } else {
    ExpInto(xp, mx, yp, n);  // masked (-inf) entries get exactly 0 (exact_math.h)
    y *= C(1) / y.sum();
  }
}

// dx of one lane from g (the incoming gradient) and y (the saved output).
template <bool kLog, typename C>
void SoftmaxBackwardLane(const C* gp, const C* yp, C* dp, int64_t n) {
  ConstArrayMap<C> g(gp, n);
  ConstArrayMap<C> y(yp, n);
  ArrayMap<C> d(dp, n);
  if constexpr (kLog) {
    const C g_sum = g.sum();
    ExpInto(yp, C(0), dp, n);  // softmax from log_softmax: exactly 0 where y is -inf
    d = g - d * g_sum;
  } else {
    d = y * (g - (g * y).sum());
  }
}

struct Lanes {
  int64_t a = 1, n = 1, k = 1;  // the [A, N, K] view of a contiguous tensor around `dim`
};

Lanes LanesOf(const Shape& sizes, int64_t dim) {
  Lanes l;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    (d < dim ? l.a : d == dim ? l.n : l.k) *= sizes[d];
  }
  return l;
}

// Runs fn(inputs, out, n) on every lane of NIn contiguous [A, N, K] inputs and the output, in ComputeT.
// Lanes of K == 1 data in the compute type are passed in place; others go through a per-thread buffer.
template <int NIn, typename T, typename Fn>
void ForEachLane(std::array<const T*, NIn> in, T* out, const Lanes& l, Fn fn) {
  using C = ComputeT<T>;
  ParallelFor(0, l.a * l.k, std::max<int64_t>(1, kGrain / l.n), [&](int64_t s, int64_t e) {
    std::vector<C> buf;
    for (int64_t lane = s; lane < e; ++lane) {
      const int64_t base = (lane / l.k) * l.n * l.k + lane % l.k;
      std::array<const C*, NIn> rows;
      if constexpr (std::is_same_v<T, C>) {
        if (l.k == 1) {
          for (int j = 0; j < NIn; ++j) rows[j] = in[j] + base;
          fn(rows, out + base, l.n);
          continue;
        }
      }
      buf.resize((NIn + 1) * l.n);
      for (int j = 0; j < NIn; ++j) {
        C* b = buf.data() + j * l.n;
        for (int64_t i = 0; i < l.n; ++i) b[i] = ToCompute(in[j][base + i * l.k]);
        rows[j] = b;
      }
      C* o = buf.data() + NIn * l.n;
      fn(rows, o, l.n);
      for (int64_t i = 0; i < l.n; ++i) out[base + i * l.k] = FromCompute<T>(o[i]);
    }
  });
}

template <bool kLog>
TensorList SoftmaxKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* name = kLog ? "log_softmax" : "softmax";
  const int64_t dim = NormalizeDim(attrs.GetInt("dim"), in[0].dim(), name);
  const Tensor x = DenseOrCopy(in[0]);
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    if (x.numel() == 0) return;
    const Lanes lanes = LanesOf(x.sizes(), dim);
    const bool round = kIsSixteenBitFloat<T> && lanes.k == 1;  // along the last dim
    ForEachLane<1, T>({static_cast<const T*>(x.raw_data())}, static_cast<T*>(out.raw_data()), lanes,
                      [round](const std::array<const C*, 1>& r, C* y, int64_t n) {
                        SoftmaxLane<kLog, C, T>(r[0], y, n, round);
                      });
  });
  return {out};
}

template <bool kLog>
TensorList SoftmaxBackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* name = kLog ? "log_softmax_backward" : "softmax_backward";
  TESSEL_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), name,
               ": grad and output must match, got ", DescribeInputs(in));
  const int64_t dim = NormalizeDim(attrs.GetInt("dim"), in[1].dim(), name);
  const Tensor g = DenseOrCopy(in[0]);
  const Tensor y = DenseOrCopy(in[1]);
  Tensor out = Empty(y.sizes(), y.dtype(), y.device());
  TESSEL_DISPATCH_FLOATING_TYPES(y.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    if (y.numel() == 0) return;
    ForEachLane<2, T>({static_cast<const T*>(g.raw_data()), static_cast<const T*>(y.raw_data())},
                      static_cast<T*>(out.raw_data()), LanesOf(y.sizes(), dim),
                      [](const std::array<const C*, 2>& r, C* d, int64_t n) {
                        SoftmaxBackwardLane<kLog, C>(r[0], r[1], d, n);
                      });
  });
  return {out};
}

// Double backward (create_graph), with gg the incoming gradient and s = sum(g * y) along dim:
//   softmax_backward(g, y) = y (g - s):   d/dg = softmax_backward(gg, y);  d/dy = gg (g - s) - g sum(gg y)
//   log_softmax_backward(g, y) = g - e^y sum(g):   d/dg = gg - sum(gg e^y);  d/dy = -gg e^y sum(g)
Tensor SumAlong(const Tensor& t, const Attrs& a) { return Sum(t, {a.GetInt("dim")}, /*keepdim=*/true); }

const OpDef& kSoftmaxBackward = RegisterOp(
    {.name = "softmax_backward",
     .cpu = SoftmaxBackwardKernel<false>,
     .backward = [](const BackwardContext& c) -> TensorList {
       const Tensor &g = c.inputs[0], &y = c.inputs[1], &gg = c.grad_outputs[0];
       Tensor dg, dy;
       if (c.needs_input_grad[0]) dg = autograd::CallOp1(kSoftmaxBackward, {gg, y}, c.attrs);
       if (c.needs_input_grad[1]) {
         dy = Sub(Mul(gg, Sub(g, SumAlong(Mul(g, y), c.attrs))), Mul(g, SumAlong(Mul(gg, y), c.attrs)));
       }
       return {dg, dy};
     }});
const OpDef& kLogSoftmaxBackward = RegisterOp(
    {.name = "log_softmax_backward",
     .cpu = SoftmaxBackwardKernel<true>,
     .backward = [](const BackwardContext& c) -> TensorList {
       const Tensor &g = c.inputs[0], &y = c.inputs[1], &gg = c.grad_outputs[0];
       const Tensor p = Exp(y);
       Tensor dg, dy;
       if (c.needs_input_grad[0]) dg = Sub(gg, SumAlong(Mul(gg, p), c.attrs));
       if (c.needs_input_grad[1]) dy = Neg(Mul(Mul(gg, p), SumAlong(g, c.attrs)));
       return {dg, dy};
     }});

const OpDef& kSoftmax = RegisterOp(
    {.name = "softmax",
     .cpu = SoftmaxKernel<false>,
     .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kSoftmaxBackward, {c.grad_outputs[0], c.outputs[0]}, c.attrs)};
     },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kLogSoftmax = RegisterOp(
    {.name = "log_softmax",
     .cpu = SoftmaxKernel<true>,
     .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kLogSoftmaxBackward, {c.grad_outputs[0], c.outputs[0]}, c.attrs)};
     },
     .save_inputs = false,
     .save_outputs = true});

}  // namespace

Tensor Softmax(const Tensor& x, int64_t dim) { return autograd::CallOp1(kSoftmax, {x}, Attrs().Set("dim", dim)); }
Tensor LogSoftmax(const Tensor& x, int64_t dim) {
  return autograd::CallOp1(kLogSoftmax, {x}, Attrs().Set("dim", dim));
}

}  // namespace tessel
