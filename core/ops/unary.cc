// core/ops/unary.cc — pointwise functions of one tensor (neg … cast): CPU kernels, backward formulas, and
// the fused pointwise backward ops they use.
//
// Defines the ops "neg", "exp", "log", "sqrt", "rsqrt", "pow", "tanh", "sigmoid", "relu", "gelu", "silu",
// "abs", "clamp", "cast", "sin", "cos", "erf", "log1p", "expm1", "exp2", "floor", "ceil", "round", plus the backward ops "tanh_backward"(grad, out), "sigmoid_backward"(grad, out),
// "threshold_backward"(grad, x), "gelu_backward"(grad, x), "silu_backward"(grad, x),
// "abs_backward"(grad, x) = grad * sgn(x) and "clamp_backward"(grad, x). Backward ops take two tensors of
// one shape and are pointwise, so dtensor/rules shards them exactly like their forward op.
//
// Invariant: every kernel computes in ComputeT (fp32 for 16-bit floats) and rounds once on store (but bf16
// x ** 3 and x ** -2, two ops rounded each as torch's); the output is contiguous with the input's shape. Float
// math runs through Eigen's packet functions on blocks of contiguous compute-type values (16-bit and strided
// inputs are staged through a stack buffer).
// The formulas of gelu/silu and their gradients are exactly PyTorch's (ATen's GeluKernel / SiLU).
//
// Example:
//   Tensor h = Gelu(x, "tanh");
//   Tensor g = autograd::CallOp1(GetOp("abs_backward"), {grad, x});   // what Abs's backward runs
#include "core/ops/unary.h"

#include <Eigen/Core>
#include <algorithm>
#include <unsupported/Eigen/SpecialFunctions>  // vectorized erf (fp32: rational fit, ~1e-7 absolute error)
#include <cmath>
#include <limits>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/exact_math.h"
#include "core/ops/pointwise_kernels.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task
constexpr int64_t kBlock = 256;      // elements staged through a stack buffer per step

template <typename C>
using ArrayMap = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;
template <typename C>
using ConstArrayMap = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
template <typename C>
using BlockArray = Eigen::Array<C, Eigen::Dynamic, 1, 0, kBlock, 1>;  // stack storage, ≤ kBlock values

enum class U {
  kNeg, kExp, kLog, kSqrt, kRsqrt, kPow, kTanh, kSigmoid, kRelu, kGelu, kGeluTanh, kSilu, kAbs, kClamp,
  kSin, kCos, kErf, kLog1p, kExpm1, kExp2, kFloor, kCeil, kRound
};

constexpr bool Rounding(U op) { return op == U::kFloor || op == U::kCeil || op == U::kRound; }
// The ops that make sense on integer tensors (torch allows these on ints too; rounding one is a copy).
constexpr bool IntegerOk(U op) {
  return op == U::kNeg || op == U::kAbs || op == U::kClamp || op == U::kRelu || Rounding(op);
}

struct UParams {
  double exponent = 1.0;
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
};

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation; 1 / sqrt(2 pi) for the erf form's pdf.
constexpr double kGeluBeta = 0.7978845608028654;
constexpr double kGeluKappa = 0.044715;
constexpr double kInvSqrt2Pi = 0.3989422804014327;
constexpr double kSqrtHalf = 0.7071067811865476;

// y[0, n) = op(x[0, n)) on compute-type values (x may alias y).
template <U kOp, typename C>
void ApplyBlock(const C* xp, C* yp, int64_t n, const UParams& p) {
  if constexpr (std::is_same_v<C, float> && (kOp == U::kGelu || kOp == U::kGeluTanh)) {
    ActivePointwiseKernels().gelu(xp, yp, n, kOp == U::kGeluTanh);  // compute-bound: per-ISA vector code
    return;
  }
  if constexpr (std::is_same_v<C, float> && (kOp == U::kSigmoid || kOp == U::kSilu)) {
    ActivePointwiseKernels().sigmoid(xp, yp, n, kOp == U::kSilu);  // the same, with Eigen's values
    return;
  }
  ConstArrayMap<C> x(xp, n);
  ArrayMap<C> y(yp, n);
  if constexpr (kOp == U::kNeg) {
    // A plain loop (the compiler flips the sign bit): Eigen's packet negation is 0 - x, which gave +0 for 0
    // in every full vector (torch.neg(zeros(8)) must be -0, as a 1-element tensor gave).
    for (int64_t i = 0; i < n; ++i) yp[i] = -xp[i];
  } else if constexpr (kOp == U::kAbs) {
    y = x.abs();
  } else if constexpr (kOp == U::kRelu) {
    for (int64_t i = 0; i < n; ++i) yp[i] = xp[i] < C(0) ? C(0) : xp[i];  // NaN stays NaN, like torch
  } else if constexpr (kOp == U::kClamp) {
    const C lo = static_cast<C>(std::isinf(p.lo) && !std::is_floating_point_v<C> ? std::numeric_limits<C>::lowest() : p.lo);
    const C hi = static_cast<C>(std::isinf(p.hi) && !std::is_floating_point_v<C> ? std::numeric_limits<C>::max() : p.hi);
    for (int64_t i = 0; i < n; ++i) {  // min(max(x, lo), hi): NaN propagates, lo > hi gives hi (torch)
      C v = xp[i] < lo ? lo : xp[i];
      yp[i] = v > hi ? hi : v;
    }
  } else if constexpr (kOp == U::kExp) {
    ExpInto(xp, C(0), yp, n);  // exact below the smallest normal result and at -inf (exact_math.h)
  } else if constexpr (kOp == U::kLog) {
    LogInto(xp, yp, n);  // exact for subnormal arguments (exact_math.h)
  } else if constexpr (kOp == U::kSqrt) {
    SqrtInto(xp, yp, n, /*inverse=*/false);  // exact at +inf (exact_math.h)
  } else if constexpr (kOp == U::kRsqrt) {
    SqrtInto(xp, yp, n, /*inverse=*/true);
  } else if constexpr (kOp == U::kPow) {
    const C e = static_cast<C>(p.exponent);
    if (e == C(2)) {
      y = x.square();
    } else if (e == C(3)) {
      y = x.cube();
    } else if (e == C(0.5)) {
      SqrtInto(xp, yp, n, /*inverse=*/false);
    } else if (e == C(-0.5)) {  // torch's special exponents: rsqrt, reciprocal, reciprocal of the square
      SqrtInto(xp, yp, n, /*inverse=*/true);
    } else if (e == C(-1)) {
      y = x.inverse();
    } else if (e == C(-2)) {
      y = x.square().inverse();
    } else if (e == C(1)) {
      y = x;
    } else {
      for (int64_t i = 0; i < n; ++i) yp[i] = std::pow(xp[i], e);
    }
  } else if constexpr (kOp == U::kTanh) {
    y = x.tanh();
  } else if constexpr (kOp == U::kSigmoid) {
    y = (C(1) + (-x).exp()).inverse();
  } else if constexpr (kOp == U::kSilu) {
    y = x / (C(1) + (-x).exp());
  } else if constexpr (kOp == U::kGeluTanh) {
    y = C(0.5) * x * (C(1) + (C(kGeluBeta) * (x + C(kGeluKappa) * x.cube())).tanh());
  } else if constexpr (kOp == U::kGelu) {
    y = x * C(0.5) * (C(1) + (x * C(kSqrtHalf)).erf());
  } else if constexpr (kOp == U::kSin) {
    y = x.sin();
  } else if constexpr (kOp == U::kCos) {
    y = x.cos();
  } else if constexpr (kOp == U::kErf) {
    y = x.erf();
  } else if constexpr (kOp == U::kLog1p) {
    y = x.log1p();
  } else if constexpr (kOp == U::kExpm1) {
    y = x.expm1();
  } else if constexpr (kOp == U::kExp2) {
    for (int64_t i = 0; i < n; ++i) yp[i] = std::exp2(xp[i]);
  } else if constexpr (Rounding(kOp) && !std::is_floating_point_v<C>) {
    y = x;  // an integer is its own floor, ceil and round
  } else if constexpr (kOp == U::kFloor) {
    y = x.floor();
  } else if constexpr (kOp == U::kCeil) {
    y = x.ceil();
  } else if constexpr (kOp == U::kRound) {
    y = x.rint();  // half to even (the default rounding mode), as torch.round
  }
}

template <U kOp>
Tensor UnaryImpl(const Tensor& x_in, const UParams& p, const char* name) {
  const Tensor x = DenseOrCopy(x_in);
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  const int64_t n = out.numel();
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    if constexpr (std::is_same_v<T, bool>) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": not supported for bool tensors (shape ",
                  ShapeStr(x.sizes()), ")");
    } else if constexpr (!std::is_floating_point_v<C> && !IntegerOk(kOp)) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": expected a floating dtype, got ", DTypeName(x.dtype()),
                  " (shape ", ShapeStr(x.sizes()), "); Cast() first");
    } else {
      const T* px = static_cast<const T*>(x.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      UParams q = p;
      if constexpr (kOp == U::kPow && !std::is_same_v<T, C>) {  // torch's pow takes the exponent in the tensor's
        q.exponent = ToCompute(FromCompute<T>(static_cast<C>(p.exponent)));  // dtype: bf16 x ** 0.7 uses 0.69921875
      }
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        if constexpr (std::is_same_v<T, C>) {
          ApplyBlock<kOp, C>(px + s, po + s, e - s, q);
        } else {
          C buf[kBlock], res[kBlock];  // separate: exact_math.h's fix-ups need the arguments
          for (int64_t b = s; b < e; b += kBlock) {
            const int64_t m = std::min(kBlock, e - b);
            for (int64_t i = 0; i < m; ++i) buf[i] = ToCompute(px[b + i]);
            if (kOp == U::kPow && std::is_same_v<T, BFloat16> && (q.exponent == 3.0 || q.exponent == -2.0)) {
              // torch's bf16 x ** 3 and x ** -2 are two vector ops on bf16, each rounded: (x·x)·x and 1 / (x·x)
              // with x·x rounded first (one rounding of x³ differs in ~20% of values); its float16 rounds once
              for (int64_t i = 0; i < m; ++i) {
                const C sq = ToCompute(FromCompute<T>(buf[i] * buf[i]));
                res[i] = q.exponent == 3.0 ? sq * buf[i] : C(1) / sq;
              }
            } else {
              ApplyBlock<kOp, C>(buf, res, m, q);
            }
            for (int64_t i = 0; i < m; ++i) po[b + i] = FromCompute<T>(res[i]);
          }
        }
      });
    }
  });
  return out;
}

UParams ParamsFrom(const Attrs& a) {
  UParams p;
  p.exponent = a.GetDouble("exponent", 1.0);
  p.lo = a.GetDouble("min", p.lo);
  p.hi = a.GetDouble("max", p.hi);
  return p;
}

template <U kOp>
Kernel UnaryCpu(const char* name) {
  return [name](std::span<const Tensor> in, const Attrs& a) -> TensorList {
    return {UnaryImpl<kOp>(in[0], ParamsFrom(a), name)};
  };
}

TensorList GeluKernel(std::span<const Tensor> in, const Attrs& a) {
  const std::string& approximate = a.GetString("approximate");
  TESSEL_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
               approximate, "'");
  if (approximate == "tanh") return {UnaryImpl<U::kGeluTanh>(in[0], {}, "gelu")};
  return {UnaryImpl<U::kGelu>(in[0], {}, "gelu")};
}

TensorList ClampKernel(std::span<const Tensor> in, const Attrs& a) {
  TESSEL_CHECK(a.Has("min") || a.Has("max"), "clamp: at least one of min or max must be given (input shape ",
               ShapeStr(in[0].sizes()), ")");
  return {UnaryImpl<U::kClamp>(in[0], ParamsFrom(a), "clamp")};
}

TensorList CastKernel(std::span<const Tensor> in, const Attrs& a) {
  const DType dtype = a.GetDType("dtype");
  if (in[0].dtype() == dtype) return {in[0]};  // like torch's .to(): no copy for the same dtype
  Tensor out = Empty(in[0].sizes(), dtype, in[0].device());
  CopyInto(out, in[0]);
  return {out};
}

// ---- fused pointwise backward ops: dx = f(grad, t) with t = x or out -----------------------------

enum class B { kTanh, kSigmoid, kThreshold, kGelu, kGeluTanh, kSilu, kAbs, kClamp };

// d[0, n) = f(g, t) on compute-type values, n ≤ kBlock.
template <B kOp, typename C>
void ApplyBackwardBlock(const C* gp, const C* tp, C* dp, int64_t n, const UParams& p) {
  if constexpr (std::is_same_v<C, float> && (kOp == B::kGelu || kOp == B::kGeluTanh)) {
    ActivePointwiseKernels().gelu_backward(gp, tp, dp, n, kOp == B::kGeluTanh);
    return;
  }
  ConstArrayMap<C> g(gp, n);
  ConstArrayMap<C> t(tp, n);
  ArrayMap<C> d(dp, n);
  if constexpr (kOp == B::kTanh) {  // t = tanh(x)
    d = g * (C(1) - t * t);
  } else if constexpr (kOp == B::kSigmoid) {  // t = sigmoid(x)
    d = g * t * (C(1) - t);
  } else if constexpr (kOp == B::kThreshold) {  // torch: x <= threshold ? 0 : grad
    const C th = static_cast<C>(p.lo);
    for (int64_t i = 0; i < n; ++i) dp[i] = tp[i] <= th ? C(0) : gp[i];
  } else if constexpr (kOp == B::kAbs) {  // grad * sgn(x)
    for (int64_t i = 0; i < n; ++i) dp[i] = gp[i] * static_cast<C>((tp[i] > C(0)) - (tp[i] < C(0)));
  } else if constexpr (kOp == B::kClamp) {  // torch 2.15 (scalar bounds): passes where lo < x < hi; 0 at a bound
    const C lo = static_cast<C>(p.lo), hi = static_cast<C>(p.hi);
    const bool has_lo = !std::isinf(p.lo), has_hi = !std::isinf(p.hi);
    for (int64_t i = 0; i < n; ++i) dp[i] = ((!has_lo || tp[i] > lo) && (!has_hi || tp[i] < hi)) ? gp[i] : C(0);
  } else if constexpr (kOp == B::kSilu) {
    BlockArray<C> s = (C(1) + (-t).exp()).inverse();
    d = g * s * (C(1) + t * (C(1) - s));
  } else if constexpr (kOp == B::kGeluTanh) {
    BlockArray<C> th = (C(kGeluBeta) * (t + C(kGeluKappa) * t.cube())).tanh();
    const BlockArray<C> inner_derivative = C(kGeluBeta) * (C(1) + C(3 * kGeluKappa) * t.square());
    d = g * (C(0.5) * (C(1) + th) + C(0.5) * t * (C(1) - th.square()) * inner_derivative);
  } else if constexpr (kOp == B::kGelu) {  // grad * (cdf(x) + x * pdf(x))
    BlockArray<C> cdf = C(0.5) * (C(1) + (t * C(kSqrtHalf)).erf());
    d = g * (cdf + t * (C(-0.5) * t.square()).exp() * C(kInvSqrt2Pi));
  }
}

template <B kOp>
Tensor BackwardImpl(const Tensor& g_in, const Tensor& t_in, const UParams& p, const char* name) {
  TESSEL_CHECK(g_in.sizes() == t_in.sizes() && g_in.dtype() == t_in.dtype(), name,
               ": grad and saved tensor must match, got ", DescribeInputs(std::vector<Tensor>{g_in, t_in}));
  const Tensor g = DenseOrCopy(g_in);
  const Tensor t = DenseOrCopy(t_in);
  Tensor out = Empty(t.sizes(), t.dtype(), t.device());
  const int64_t n = out.numel();
  TESSEL_DISPATCH_FLOATING_TYPES(t.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    const T* pg = static_cast<const T*>(g.raw_data());
    const T* pt = static_cast<const T*>(t.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
      C gb[kBlock], tb[kBlock];
      for (int64_t b = s; b < e; b += kBlock) {
        const int64_t m = std::min(kBlock, e - b);
        if constexpr (std::is_same_v<T, C>) {
          ApplyBackwardBlock<kOp, C>(pg + b, pt + b, po + b, m, p);
        } else {
          for (int64_t i = 0; i < m; ++i) gb[i] = ToCompute(pg[b + i]), tb[i] = ToCompute(pt[b + i]);
          ApplyBackwardBlock<kOp, C>(gb, tb, gb, m, p);
          for (int64_t i = 0; i < m; ++i) po[b + i] = FromCompute<T>(gb[i]);
        }
      }
    });
  });
  return out;
}

template <B kOp>
Kernel BackwardCpu(const char* name) {
  return [name](std::span<const Tensor> in, const Attrs& a) -> TensorList {
    return {BackwardImpl<kOp>(in[0], in[1], ParamsFrom(a), name)};
  };
}

TensorList GeluBackwardKernel(std::span<const Tensor> in, const Attrs& a) {
  if (a.GetString("approximate") == "tanh") return {BackwardImpl<B::kGeluTanh>(in[0], in[1], {}, "gelu_backward")};
  return {BackwardImpl<B::kGelu>(in[0], in[1], {}, "gelu_backward")};
}

TensorList ThresholdBackwardKernel(std::span<const Tensor> in, const Attrs& a) {
  UParams p;
  p.lo = a.GetDouble("threshold", 0.0);
  return {BackwardImpl<B::kThreshold>(in[0], in[1], p, "threshold_backward")};
}

// ---- double backward (create_graph) of the fused backward ops: op(g, t) is linear in g, so its gradient
// in g is the same op applied to the incoming gradient gg; in t it is g * gg * (the first derivative's
// derivative), zero for the piecewise-constant masks (relu, abs, clamp). -------------------------------

// `second` undefined: the derivative in t is zero (a zero tensor, as torch's, so the input counts as used).
TensorList SameOpOnGrad(const BackwardContext& c, const OpDef& op, Tensor second) {
  Tensor first = c.needs_input_grad[0] ? autograd::CallOp1(op, {c.grad_outputs[0], c.inputs[1]}, c.attrs) : Tensor();
  if (!c.needs_input_grad[1]) return {first, Tensor()};
  return {first, second.defined() ? std::move(second) : ZerosLike(c.inputs[1])};
}
// g * gg * f(t), the gradient in t of a backward op whose derivative in t is g * f(t).
Tensor GradTimes(const BackwardContext& c, const Tensor& f_t) {
  return Mul(Mul(c.inputs[0], c.grad_outputs[0]), f_t);
}

const OpDef& kTanhBackward = RegisterOp(  // g (1 - t^2): d/dt = -2 g t
    {.name = "tanh_backward",
     .cpu = BackwardCpu<B::kTanh>("tanh_backward"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return SameOpOnGrad(c, kTanhBackward, c.needs_input_grad[1] ? GradTimes(c, MulScalar(c.inputs[1], -2.0)) : Tensor());
     }});
const OpDef& kSigmoidBackward = RegisterOp(  // g t (1 - t): d/dt = g (1 - 2 t)
    {.name = "sigmoid_backward",
     .cpu = BackwardCpu<B::kSigmoid>("sigmoid_backward"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return SameOpOnGrad(c, kSigmoidBackward,
                           c.needs_input_grad[1] ? GradTimes(c, AddScalar(MulScalar(c.inputs[1], -2.0), 1.0)) : Tensor());
     }});
const OpDef& kThresholdBackward = RegisterOp(
    {.name = "threshold_backward",
     .cpu = ThresholdBackwardKernel,
     .backward = [](const BackwardContext& c) -> TensorList { return SameOpOnGrad(c, kThresholdBackward, Tensor()); }});
// gelu''(x): erf form phi(x) (2 - x^2); tanh form, with u = b (x + k x^3), t = tanh(u), u' = b (1 + 3 k x^2),
// u'' = 6 b k x:  (1 - t^2) (u' - x t u'^2 + x u'' / 2).
Tensor GeluSecondDerivative(const Tensor& x, bool tanh_form) {
  const Tensor x2 = Mul(x, x);
  if (!tanh_form) return Mul(MulScalar(Exp(MulScalar(x2, -0.5)), kInvSqrt2Pi), AddScalar(Neg(x2), 2.0));
  const Tensor t = Tanh(MulScalar(Add(x, MulScalar(Mul(x2, x), kGeluKappa)), kGeluBeta));
  const Tensor du = MulScalar(AddScalar(MulScalar(x2, 3.0 * kGeluKappa), 1.0), kGeluBeta);
  const Tensor inner = Add(Sub(du, Mul(Mul(x, t), Mul(du, du))), MulScalar(x2, 3.0 * kGeluBeta * kGeluKappa));
  return Mul(AddScalar(Neg(Mul(t, t)), 1.0), inner);
}

const OpDef& kGeluBackward = RegisterOp(
    {.name = "gelu_backward",
     .cpu = GeluBackwardKernel,
     .backward = [](const BackwardContext& c) -> TensorList {
       Tensor second;
       if (c.needs_input_grad[1]) {
         second = GradTimes(c, GeluSecondDerivative(c.inputs[1], c.attrs.GetString("approximate") == "tanh"));
       }
       return SameOpOnGrad(c, kGeluBackward, std::move(second));
     }});
const OpDef& kSiluBackward = RegisterOp(  // silu''(x) = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)
    {.name = "silu_backward",
     .cpu = BackwardCpu<B::kSilu>("silu_backward"),
     .backward = [](const BackwardContext& c) -> TensorList {
       Tensor second;
       if (c.needs_input_grad[1]) {
         const Tensor& x = c.inputs[1];
         const Tensor s = Sigmoid(x);
         const Tensor ds = Mul(s, AddScalar(Neg(s), 1.0));
         second = GradTimes(c, Mul(ds, AddScalar(Mul(x, AddScalar(MulScalar(s, -2.0), 1.0)), 2.0)));
       }
       return SameOpOnGrad(c, kSiluBackward, std::move(second));
     }});
const OpDef& kAbsBackward = RegisterOp(
    {.name = "abs_backward",
     .cpu = BackwardCpu<B::kAbs>("abs_backward"),
     .backward = [](const BackwardContext& c) -> TensorList { return SameOpOnGrad(c, kAbsBackward, Tensor()); }});
const OpDef& kClampBackward = RegisterOp(
    {.name = "clamp_backward",
     .cpu = BackwardCpu<B::kClamp>("clamp_backward"),
     .backward = [](const BackwardContext& c) -> TensorList { return SameOpOnGrad(c, kClampBackward, Tensor()); }});

// ---- backward formulas (public ops only, so they also run on distributed tensors) ---------------

const Tensor& Grad(const BackwardContext& c) { return c.grad_outputs[0]; }

TensorList PowBackward(const BackwardContext& c) {
  const double e = c.attrs.GetDouble("exponent");
  if (e == 0.0) return {ZerosLike(Grad(c))};
  if (e == 1.0) return {Grad(c)};
  return {Mul(Grad(c), MulScalar(Pow(c.inputs[0], e - 1.0), e))};
}

TensorList ClampBackward(const BackwardContext& c) {
  Attrs a;
  if (c.attrs.Has("min")) a.Set("min", c.attrs.GetDouble("min"));
  if (c.attrs.Has("max")) a.Set("max", c.attrs.GetDouble("max"));
  return {autograd::CallOp1(kClampBackward, {Grad(c), c.inputs[0]}, a)};
}

const OpDef& kNeg = RegisterOp({.name = "neg",
                                .cpu = UnaryCpu<U::kNeg>("neg"),
                                .backward = [](const BackwardContext& c) -> TensorList { return {Neg(Grad(c))}; },
                                .save_inputs = false});
const OpDef& kExp = RegisterOp(
    {.name = "exp",
     .cpu = UnaryCpu<U::kExp>("exp"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Mul(Grad(c), c.outputs[0])}; },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kLog = RegisterOp(
    {.name = "log",
     .cpu = UnaryCpu<U::kLog>("log"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Div(Grad(c), c.inputs[0])}; }});
const OpDef& kSqrt = RegisterOp(  // d sqrt(x) = 1 / (2 sqrt(x))
    {.name = "sqrt",
     .cpu = UnaryCpu<U::kSqrt>("sqrt"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Div(MulScalar(Grad(c), 0.5), c.outputs[0])}; },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kRsqrt = RegisterOp(  // d x^-1/2 = -x^-3/2 / 2 = -out^3 / 2
    {.name = "rsqrt",
     .cpu = UnaryCpu<U::kRsqrt>("rsqrt"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return {Mul(Grad(c), MulScalar(Pow(c.outputs[0], 3.0), -0.5))};
     },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kPow = RegisterOp({.name = "pow", .cpu = UnaryCpu<U::kPow>("pow"), .backward = PowBackward});
const OpDef& kTanh = RegisterOp(
    {.name = "tanh",
     .cpu = UnaryCpu<U::kTanh>("tanh"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kTanhBackward, {Grad(c), c.outputs[0]})};
     },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kSigmoid = RegisterOp(
    {.name = "sigmoid",
     .cpu = UnaryCpu<U::kSigmoid>("sigmoid"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kSigmoidBackward, {Grad(c), c.outputs[0]})};
     },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kRelu = RegisterOp(  // like torch: the mask comes from the output (out > 0 iff x > 0)
    {.name = "relu",
     .cpu = UnaryCpu<U::kRelu>("relu"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kThresholdBackward, {Grad(c), c.outputs[0]}, Attrs().Set("threshold", 0.0))};
     },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kGelu = RegisterOp(
    {.name = "gelu",
     .cpu = GeluKernel,
     .backward = [](const BackwardContext& c) -> TensorList {
       return {autograd::CallOp1(kGeluBackward, {Grad(c), c.inputs[0]},
                                 Attrs().Set("approximate", c.attrs.GetString("approximate")))};
     }});
const OpDef& kSilu = RegisterOp({.name = "silu",
                                 .cpu = UnaryCpu<U::kSilu>("silu"),
                                 .backward = [](const BackwardContext& c) -> TensorList {
                                   return {autograd::CallOp1(kSiluBackward, {Grad(c), c.inputs[0]})};
                                 }});
const OpDef& kAbs = RegisterOp({.name = "abs",
                                .cpu = UnaryCpu<U::kAbs>("abs"),
                                .backward = [](const BackwardContext& c) -> TensorList {
                                  return {autograd::CallOp1(kAbsBackward, {Grad(c), c.inputs[0]})};
                                }});
const OpDef& kClamp = RegisterOp({.name = "clamp", .cpu = ClampKernel, .backward = ClampBackward});
const OpDef& kSin = RegisterOp(
    {.name = "sin",
     .cpu = UnaryCpu<U::kSin>("sin"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Mul(Grad(c), Cos(c.inputs[0]))}; }});
const OpDef& kCos = RegisterOp(
    {.name = "cos",
     .cpu = UnaryCpu<U::kCos>("cos"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Mul(Grad(c), Neg(Sin(c.inputs[0])))}; }});
const OpDef& kErf = RegisterOp(  // d erf(x) = 2 / sqrt(pi) exp(-x^2)
    {.name = "erf",
     .cpu = UnaryCpu<U::kErf>("erf"),
     .backward = [](const BackwardContext& c) -> TensorList {
       const Tensor& x = c.inputs[0];
       return {Mul(Grad(c), MulScalar(Exp(Neg(Mul(x, x))), 1.1283791670955126))};
     }});
const OpDef& kLog1p = RegisterOp(
    {.name = "log1p",
     .cpu = UnaryCpu<U::kLog1p>("log1p"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Div(Grad(c), AddScalar(c.inputs[0], 1.0))}; }});
const OpDef& kExpm1 = RegisterOp(  // d (e^x - 1) = e^x = out + 1
    {.name = "expm1",
     .cpu = UnaryCpu<U::kExpm1>("expm1"),
     .backward = [](const BackwardContext& c) -> TensorList { return {Mul(Grad(c), AddScalar(c.outputs[0], 1.0))}; },
     .save_inputs = false,
     .save_outputs = true});
const OpDef& kExp2 = RegisterOp(  // d 2^x = ln 2 * 2^x
    {.name = "exp2",
     .cpu = UnaryCpu<U::kExp2>("exp2"),
     .backward = [](const BackwardContext& c) -> TensorList {
       return {Mul(Grad(c), MulScalar(c.outputs[0], 0.6931471805599453))};
     },
     .save_inputs = false,
     .save_outputs = true});
// Piecewise constant: zero gradient everywhere (torch's convention at the jumps too).
TensorList ZeroBackward(const BackwardContext& c) { return {ZerosLike(Grad(c))}; }
const OpDef& kFloor =
    RegisterOp({.name = "floor", .cpu = UnaryCpu<U::kFloor>("floor"), .backward = ZeroBackward, .save_inputs = false});
const OpDef& kCeil =
    RegisterOp({.name = "ceil", .cpu = UnaryCpu<U::kCeil>("ceil"), .backward = ZeroBackward, .save_inputs = false});
const OpDef& kRound =
    RegisterOp({.name = "round", .cpu = UnaryCpu<U::kRound>("round"), .backward = ZeroBackward, .save_inputs = false});
// "src_dtype" records the input dtype so the backward can cast back without keeping the input alive.
const OpDef& kCast = RegisterOp(
    {.name = "cast",
     .cpu = CastKernel,
     .backward = [](const BackwardContext& c) -> TensorList {
       return {Cast(Grad(c), c.attrs.GetDType("src_dtype"))};
     },
     .save_inputs = false});

}  // namespace

Tensor Neg(const Tensor& x) { return autograd::CallOp1(kNeg, {x}); }
Tensor Exp(const Tensor& x) { return autograd::CallOp1(kExp, {x}); }
Tensor Log(const Tensor& x) { return autograd::CallOp1(kLog, {x}); }
Tensor Sqrt(const Tensor& x) { return autograd::CallOp1(kSqrt, {x}); }
Tensor Rsqrt(const Tensor& x) { return autograd::CallOp1(kRsqrt, {x}); }
Tensor Pow(const Tensor& x, double exponent) {
  return autograd::CallOp1(kPow, {x}, Attrs().Set("exponent", exponent));
}
Tensor Tanh(const Tensor& x) { return autograd::CallOp1(kTanh, {x}); }
Tensor Sigmoid(const Tensor& x) { return autograd::CallOp1(kSigmoid, {x}); }
Tensor Relu(const Tensor& x) { return autograd::CallOp1(kRelu, {x}); }
Tensor Gelu(const Tensor& x, const std::string& approximate) {
  return autograd::CallOp1(kGelu, {x}, Attrs().Set("approximate", approximate));
}
Tensor Silu(const Tensor& x) { return autograd::CallOp1(kSilu, {x}); }
Tensor Sin(const Tensor& x) { return autograd::CallOp1(kSin, {x}); }
Tensor Cos(const Tensor& x) { return autograd::CallOp1(kCos, {x}); }
Tensor Erf(const Tensor& x) { return autograd::CallOp1(kErf, {x}); }
Tensor Log1p(const Tensor& x) { return autograd::CallOp1(kLog1p, {x}); }
Tensor Expm1(const Tensor& x) { return autograd::CallOp1(kExpm1, {x}); }
Tensor Exp2(const Tensor& x) { return autograd::CallOp1(kExp2, {x}); }
Tensor Floor(const Tensor& x) { return autograd::CallOp1(kFloor, {x}); }
Tensor Ceil(const Tensor& x) { return autograd::CallOp1(kCeil, {x}); }
Tensor Round(const Tensor& x) { return autograd::CallOp1(kRound, {x}); }
Tensor Abs(const Tensor& x) { return autograd::CallOp1(kAbs, {x}); }
Tensor Clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  Attrs a;
  if (min) a.Set("min", *min);
  if (max) a.Set("max", *max);
  return autograd::CallOp1(kClamp, {x}, a);
}
Tensor Cast(const Tensor& x, DType dtype) {
  return autograd::CallOp1(kCast, {x}, Attrs().Set("dtype", dtype).Set("src_dtype", x.dtype()));
}

}  // namespace tessel
