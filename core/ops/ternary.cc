// core/ops/ternary.cc — selection by a boolean mask ("where", "masked_fill"), the comparisons that
// build masks ("eq", "lt", "gt"), the selections by comparison ("maximum", "minimum") and the three-operand
// arithmetic of optimizer updates ("addcmul", "addcdiv", "lerp", "lerp_tensor" and their in-place forms):
// CPU kernels and backward formulas.
//
// Invariant: all operands broadcast numpy-style to one output shape; value operands share one dtype
// (no promotion, like elementwise.h); masks are bool. Gradients reach only the selected side (the other
// side gets zeros) and are summed back to each input's shape; masks and comparisons never get gradients.
// MaskedFill broadcasts mask and x both (torch's out-of-place masked_fill).
//
// Example:
//   Tensor causal_TT = Gt(col_TT, row_TT);                          // bool
//   Tensor s_TT = MaskedFill(scores_TT, causal_TT, -INFINITY);
//   Tensor y = Where(Lt(x, zeros), zeros, x);                       // relu by selection
#include "core/ops/ternary.h"

#include <cmath>
#include <cstdint>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/tensor/factory.h"
#include "core/tensor/strided_loop.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 15;

// Strides of `t` broadcast to `shape` (0 on broadcast dims).
Shape BroadcastStridesTo(const Tensor& t, const Shape& shape) {
  Shape out(shape.size(), 0);
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) out[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return out;
}

// True when every operand is contiguous with exactly `shape` (the flat fast path applies).
bool AllFlat(std::initializer_list<const Tensor*> ts, const Shape& shape) {
  for (const Tensor* t : ts) {
    if (!t->is_contiguous() || t->sizes() != shape) return false;
  }
  return true;
}

void CheckSameDType(const Tensor& a, const Tensor& b, const char* name) {
  TESSEL_CHECK(a.dtype() == b.dtype(), name, ": dtype mismatch ", a.dtype(), " vs ", b.dtype(), " (shapes ",
               ShapeStr(a.sizes()), ", ", ShapeStr(b.sizes()), "); cast one side explicitly");
}

void CheckMask(const Tensor& m, const char* name, const char* what) {
  TESSEL_CHECK(m.dtype() == DType::kBool, name, ": ", what, " must be a bool tensor, got ", m.dtype(), " of shape ",
               ShapeStr(m.sizes()));
}

// c ? a : b with both sides already loaded: a branch on a random mask mispredicts half the time, a
// select of loaded values vectorizes to a blend (16-bit floats select their bits).
template <typename T>
inline T Select(uint8_t c, T a, T b) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
    return T{static_cast<uint16_t>(c != 0 ? a.bits : b.bits)};
  } else {
    return c != 0 ? a : b;
  }
}

// A bool tensor's bytes (0 or 1). NOTE: read as uint8_t because GCC does not vectorize loads of bool.
const uint8_t* MaskBytes(const Tensor& m) { return static_cast<const uint8_t*>(m.raw_data()); }

// The (empty) output of a binary op on a and b of one dtype: their broadcast shape, in `dtype`.
Tensor BinaryOutput(const Tensor& a, const Tensor& b, DType dtype, const char* name) {
  CheckSameDType(a, b, name);
  return Empty(BroadcastShapes(a.sizes(), b.sizes(), name), dtype, a.device());
}

// po[i] = f(a[i], b[i]) over out's (the broadcast) shape, po being out's data: the flat loop when both operands
// are dense with that shape, else the strided one.
template <typename T, typename O, typename F>
void BinaryLoop(const Tensor& a, const Tensor& b, const Tensor& out, O* po, F f) {
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  const Shape& shape = out.sizes();
  const int64_t n = out.numel();
  if (n == 0) return;
  if (AllFlat({&a, &b}, shape)) {
    ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  const Shape so = out.strides(), sa = BroadcastStridesTo(a, shape), sb = BroadcastStridesTo(b, shape);
  ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
    ForEachStrided<3>(shape, {std::span<const int64_t>(so), std::span<const int64_t>(sa), std::span<const int64_t>(sb)},
                      [&](const int64_t* off) { po[off[0]] = f(pa[off[1]], pb[off[2]]); }, s, e);
  });
}

enum class Cmp { kEq, kLt, kGt, kNe, kLe, kGe };

template <Cmp kOp>
TensorList CompareKernel(std::span<const Tensor> in, const char* name) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  Tensor out = BinaryOutput(a, b, DType::kBool, name);
  uint8_t* po = static_cast<uint8_t*>(out.raw_data());  // bool bytes (see MaskBytes)
  TESSEL_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    using T = scalar_t;
    BinaryLoop<T>(a, b, out, po, [](T x, T y) -> uint8_t {
      const auto cx = ToCompute(x), cy = ToCompute(y);
      if constexpr (kOp == Cmp::kEq) {
        return cx == cy;
      } else if constexpr (kOp == Cmp::kLt) {
        return cx < cy;
      } else if constexpr (kOp == Cmp::kGt) {
        return cx > cy;
      } else if constexpr (kOp == Cmp::kNe) {
        return cx != cy;  // true for NaN
      } else if constexpr (kOp == Cmp::kLe) {
        return cx <= cy;
      } else {
        return cx >= cy;
      }
    });
  });
  return {out};
}

TensorList WhereKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& cond = in[0];
  const Tensor& a = in[1];
  const Tensor& b = in[2];
  CheckMask(cond, "where", "condition");
  CheckSameDType(a, b, "where");
  const Shape shape = BroadcastShapes(BroadcastShapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = Empty(shape, a.dtype(), a.device());
  const int64_t n = out.numel();
  if (n == 0) return {out};
  const uint8_t* pc = MaskBytes(cond);
  TESSEL_DISPATCH_ALL_TYPES(a.dtype(), "where", [&] {
    using T = scalar_t;
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    if (AllFlat({&cond, &a, &b}, shape)) {
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) po[i] = Select(pc[i], pa[i], pb[i]);
      });
      return;
    }
    const Shape so = out.strides(), sc = BroadcastStridesTo(cond, shape);
    const Shape sa = BroadcastStridesTo(a, shape), sb = BroadcastStridesTo(b, shape);
    ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
      ForEachStrided<4>(shape,
                        {std::span<const int64_t>(so), std::span<const int64_t>(sc), std::span<const int64_t>(sa),
                         std::span<const int64_t>(sb)},
                        [&](const int64_t* off) { po[off[0]] = Select(pc[off[1]], pa[off[2]], pb[off[3]]); }, s, e);
    });
  });
  return {out};
}

template <typename T>
T FillValue(double value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value != 0;
  } else {
    return FromCompute<T>(static_cast<ComputeT<T>>(value));
  }
}

TensorList MaskedFillKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Tensor& mask = in[1];
  const double value = attrs.GetDouble("value");
  CheckMask(mask, "masked_fill", "mask");
  TESSEL_CHECK(IsFloating(x.dtype()) || std::isfinite(value), "masked_fill: value ", value,
               " cannot be converted to ", x.dtype(), " (input shape ", ShapeStr(x.sizes()), ")");
  const Shape shape = BroadcastShapes(x.sizes(), mask.sizes(), "masked_fill");
  Tensor out = Empty(shape, x.dtype(), x.device());
  const int64_t n = out.numel();
  if (n == 0) return {out};
  const uint8_t* pm = MaskBytes(mask);
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "masked_fill", [&] {
    using T = scalar_t;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const T v = FillValue<T>(value);
    if (AllFlat({&x, &mask}, shape)) {
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) po[i] = Select(pm[i], v, px[i]);
      });
      return;
    }
    const Shape so = out.strides(), sx = BroadcastStridesTo(x, shape), sm = BroadcastStridesTo(mask, shape);
    ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
      ForEachStrided<3>(shape, {std::span<const int64_t>(so), std::span<const int64_t>(sx), std::span<const int64_t>(sm)},
                        [&](const int64_t* off) { po[off[0]] = Select(pm[off[2]], v, px[off[1]]); }, s, e);
    });
  });
  return {out};
}

// maximum / minimum: the larger (smaller) of a and b, a on a tie, NaN where either is NaN (torch's).
template <bool kMax>
TensorList MinMaxKernel(std::span<const Tensor> in, const char* name) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  Tensor out = BinaryOutput(a, b, a.dtype(), name);
  TESSEL_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    using T = scalar_t;
    BinaryLoop<T>(a, b, out, static_cast<T*>(out.raw_data()), [](T x, T y) {
      const auto cx = ToCompute(x), cy = ToCompute(y);
      const bool keep = kMax ? cx >= cy : cx <= cy;  // false when either is NaN: then x if it is the NaN
      return Select(static_cast<uint8_t>(keep || cx != cx), x, y);
    });
  });
  return {out};
}

// ---- addcmul, addcdiv, lerp -------------------------------------------------------------------------

// torch's CPU kernels element for element, in the compute type (float for float32 and the 16-bit floats,
// double for float64; the scalar rounded to it first): addcmul = fma(value·t1, t2, self), addcdiv = self +
// value·t1 / t2, lerp = fma(w, end - self, self) where |w| < 0.5, else fma(w - 1, end - self, end) (torch's
// vector body: at w = 1 the sign of a zero result is its; its scalar tail can give the other zero). torch's
// vector kernels fuse these multiply-adds (PyTorch 2.15 from PyPI, float32 / float64 / bfloat16 / float16,
// 10^5 values each: bit-equal to these and not to the unfused forms, which differ in 11-50% of float32 values).
enum class Fused { kAddcmul, kAddcdiv, kLerpSmall, kLerpLarge, kLerpTensor };

template <Fused kF, typename C>
inline C FusedValue(C s, C x, C y, C value, C w_minus_one) {
  if constexpr (kF == Fused::kAddcmul) {
    return std::fma(value * x, y, s);
  } else if constexpr (kF == Fused::kAddcdiv) {
    return s + value * x / y;
  } else if constexpr (kF == Fused::kLerpSmall) {  // x = end, value = w
    return std::fma(value, x - s, s);
  } else if constexpr (kF == Fused::kLerpLarge) {
    return std::fma(w_minus_one, x - s, x);
  } else {  // x = end, y = the weight
    const C d = x - s;
    return std::abs(y) < C(0.5) ? std::fma(y, d, s) : std::fma(y - C(1), d, x);
  }
}

// The floating dtype every operand of `name` shares (torch promotes first; the Python face does).
DType FusedDType(std::initializer_list<const Tensor*> ts, const char* name) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts) CheckSameDType(first, *t, name);
  TESSEL_CHECK(IsFloating(first.dtype()), name, ": expected floating tensors, got ", first.dtype(), " (shape ",
               ShapeStr(first.sizes()), ")");
  return first.dtype();
}

// po[i] = at(i) for i in [0, n), split over the threads.
template <typename T, typename G>
void FillFlat(T* po, int64_t n, G at) {
  ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = at(i);
  });
}

// out = f(a, b, c) elementwise over out's shape, every operand broadcast to it (out may be a itself: in place).
template <typename T, typename F>
void TernaryLoop(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out, F f) {
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  const T* pc = static_cast<const T*>(c.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const Shape& shape = out.sizes();
  const int64_t n = out.numel();
  if (n == 0) return;
  if (AllFlat({&a, &b, &c, &out}, shape)) return FillFlat(po, n, [&](int64_t i) { return f(pa[i], pb[i], pc[i]); });
  // One operand a single number (a 0-d tensor: torch.add with alpha is addcmul(x, 1, y, alpha), addcmul /
  // lerp with a tensor scalar), the others flat: one contiguous pass, not the strided walk (0.76 -> ~0.5 ms for
  // 1M floats).
  if (b.numel() == 1 && AllFlat({&a, &c, &out}, shape)) {
    const T vb = pb[0];
    return FillFlat(po, n, [&](int64_t i) { return f(pa[i], vb, pc[i]); });
  }
  if (c.numel() == 1 && AllFlat({&a, &b, &out}, shape)) {
    const T vc = pc[0];
    return FillFlat(po, n, [&](int64_t i) { return f(pa[i], pb[i], vc); });
  }
  const Shape so = out.strides(), sa = BroadcastStridesTo(a, shape), sb = BroadcastStridesTo(b, shape);
  const Shape sc = BroadcastStridesTo(c, shape);
  ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
    ForEachStrided<4>(shape,
                      {std::span<const int64_t>(so), std::span<const int64_t>(sa), std::span<const int64_t>(sb),
                       std::span<const int64_t>(sc)},
                      [&](const int64_t* off) { po[off[0]] = f(pa[off[1]], pb[off[2]], pc[off[3]]); }, s, e);
  });
}

// in: self, x, y (lerp: self, end, end again; lerp_tensor: self, end, weight). In place: self is written and
// must already have the broadcast shape (torch's message otherwise). The 16-bit floats round once at the end.
template <Fused kF>
TensorList FusedKernel(std::span<const Tensor> in, double value, bool in_place, const char* name) {
  const Tensor& self = in[0];
  const DType dt = FusedDType({&in[0], &in[1], &in[2]}, name);
  const Shape shape = BroadcastShapes(BroadcastShapes(self.sizes(), in[1].sizes(), name), in[2].sizes(), name);
  Tensor out;
  if (in_place) {
    TESSEL_CHECK(shape == self.sizes(), name, ": output with shape ", ShapeStr(self.sizes()),
                 " doesn't match the broadcast shape ", ShapeStr(shape));
    CheckNoInternalOverlap(self, name);
    CheckNoPartialOverlap(self, in[1], name);
    CheckNoPartialOverlap(self, in[2], name);
    self.impl()->storage().BumpVersion();
    out = self;
  } else {
    out = Empty(shape, dt, self.device());
  }
  TESSEL_DISPATCH_FLOATING_TYPES(dt, name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    const C v = static_cast<C>(value), w_minus_one = v - C(1);
    TernaryLoop<T>(self, in[1], in[2], out, [v, w_minus_one](T s, T x, T y) {
      return FromCompute<T>(FusedValue<kF, C>(ToCompute(s), ToCompute(x), ToCompute(y), v, w_minus_one));
    });
  });
  return {out};
}

// lerp with a number weight: torch's branch on |w| < 0.5 (in the compute type) taken once for the tensor.
TensorList LerpKernel(std::span<const Tensor> in, const Attrs& attrs, bool in_place, const char* name) {
  const double w = attrs.GetDouble("weight");
  const Tensor args[] = {in[0], in[1], in[1]};
  const bool small =
      in[0].dtype() == DType::kFloat64 ? std::abs(w) < 0.5 : std::abs(static_cast<float>(w)) < 0.5f;
  return small ? FusedKernel<Fused::kLerpSmall>(args, w, in_place, name)
               : FusedKernel<Fused::kLerpLarge>(args, w, in_place, name);
}

// ---- backward formulas --------------------------------------------------------------------------

Tensor Reduce(const Tensor& g, const Shape& shape) { return g.sizes() == shape ? g : SumToSize(g, shape); }

TensorList WhereBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& cond = c.inputs[0];
  Tensor ga, gb;
  if (c.needs_input_grad[1]) ga = Reduce(Where(cond, g, ZerosLike(g)), c.input_sizes[1]);
  if (c.needs_input_grad[2]) gb = Reduce(MaskedFill(g, cond, 0.0), c.input_sizes[2]);
  return {Tensor(), ga, gb};
}

TensorList MaskedFillBackward(const BackwardContext& c) {
  return {Reduce(MaskedFill(c.grad_outputs[0], c.inputs[1], 0.0), c.input_sizes[0]), Tensor()};
}

// torch's: a tie gives each side half; a side that loses gets 0; a NaN on either side gives both the whole
// gradient (neither loses: every comparison is false).
template <bool kMax>
TensorList MinMaxBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor share = Where(Eq(a, b), MulScalar(g, 0.5), g);
  Tensor ga, gb;
  if (c.needs_input_grad[0]) ga = Reduce(MaskedFill(share, kMax ? Lt(a, b) : Gt(a, b), 0.0), c.input_sizes[0]);
  if (c.needs_input_grad[1]) gb = Reduce(MaskedFill(share, kMax ? Gt(a, b) : Lt(a, b), 0.0), c.input_sizes[1]);
  return {ga, gb};
}

// torch's derivatives: addcmul's t1 gets g·(t2·value), t2 g·(t1·value); addcdiv's t1 g·(value / t2), t2
// -g·(value·t1 / t2²); lerp's self g·(1 - w), end g·w, a tensor weight g·(end - self). self always gets g
// (lerp: scaled), each summed back to its input's shape.
TensorList AddcBackward(const BackwardContext& c, bool div) {
  const Tensor& g = c.grad_outputs[0];
  const double value = c.attrs.GetDouble("value");
  const Tensor& t1 = c.inputs[1];
  const Tensor& t2 = c.inputs[2];
  Tensor gs, g1, g2;
  if (c.needs_input_grad[0]) gs = Reduce(g, c.input_sizes[0]);
  if (c.needs_input_grad[1]) {
    const Tensor d = div ? Mul(g, Div(Scalar(value, t2.dtype(), t2.device()), t2)) : Mul(g, MulScalar(t2, value));
    g1 = Reduce(d, c.input_sizes[1]);
  }
  if (c.needs_input_grad[2]) {
    const Tensor d = div ? MulScalar(Mul(g, Div(MulScalar(t1, value), Mul(t2, t2))), -1.0)
                         : Mul(g, MulScalar(t1, value));
    g2 = Reduce(d, c.input_sizes[2]);
  }
  return {gs, g1, g2};
}

TensorList LerpBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const double w = c.attrs.GetDouble("weight");
  Tensor gs, ge;
  if (c.needs_input_grad[0]) gs = Reduce(MulScalar(g, 1.0 - w), c.input_sizes[0]);
  if (c.needs_input_grad[1]) ge = Reduce(MulScalar(g, w), c.input_sizes[1]);
  return {gs, ge};
}

TensorList LerpTensorBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& w = c.inputs[2];
  Tensor gs, ge, gw;
  if (c.needs_input_grad[0]) gs = Reduce(Mul(g, Sub(Scalar(1.0, w.dtype(), w.device()), w)), c.input_sizes[0]);
  if (c.needs_input_grad[1]) ge = Reduce(Mul(g, w), c.input_sizes[1]);
  if (c.needs_input_grad[2]) gw = Reduce(Mul(g, Sub(c.inputs[1], c.inputs[0])), c.input_sizes[2]);
  return {gs, ge, gw};
}

// Both save only the mask: the values' gradients need their shapes alone (BackwardContext::input_sizes).
const OpDef& kWhere =
    RegisterOp({.name = "where", .cpu = WhereKernel, .backward = WhereBackward, .saved_inputs = {0}});
const OpDef& kMaskedFill =
    RegisterOp({.name = "masked_fill", .cpu = MaskedFillKernel, .backward = MaskedFillBackward, .saved_inputs = {1}});
const OpDef& kEq = RegisterOp({.name = "eq", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kEq>(in, "eq"); }});
const OpDef& kLt = RegisterOp({.name = "lt", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kLt>(in, "lt"); }});
const OpDef& kGt = RegisterOp({.name = "gt", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kGt>(in, "gt"); }});
// != <= >= in one pass each (they were not(==), < or ==, > or ==: two and three ops, 2-3x the per-call time)
const OpDef& kNe = RegisterOp({.name = "ne", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kNe>(in, "ne"); }});
const OpDef& kLe = RegisterOp({.name = "le", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kLe>(in, "le"); }});
const OpDef& kGe = RegisterOp({.name = "ge", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kGe>(in, "ge"); }});
const OpDef& kMaximum = RegisterOp({.name = "maximum",
                                   .cpu = [](auto in, auto&) { return MinMaxKernel<true>(in, "maximum"); },
                                   .backward = MinMaxBackward<true>});
const OpDef& kMinimum = RegisterOp({.name = "minimum",
                                   .cpu = [](auto in, auto&) { return MinMaxKernel<false>(in, "minimum"); },
                                   .backward = MinMaxBackward<false>});


const OpDef& kAddcmul = RegisterOp(
    {.name = "addcmul",
     .cpu = [](auto in, auto& a) { return FusedKernel<Fused::kAddcmul>(in, a.GetDouble("value"), false, "addcmul"); },
     .backward = [](const BackwardContext& c) { return AddcBackward(c, false); },
     .saved_inputs = {1, 2}});
const OpDef& kAddcdiv = RegisterOp(
    {.name = "addcdiv",
     .cpu = [](auto in, auto& a) { return FusedKernel<Fused::kAddcdiv>(in, a.GetDouble("value"), false, "addcdiv"); },
     .backward = [](const BackwardContext& c) { return AddcBackward(c, true); },
     .saved_inputs = {1, 2}});
const OpDef& kLerp = RegisterOp({.name = "lerp",
                                .cpu = [](auto in, auto& a) { return LerpKernel(in, a, false, "lerp"); },
                                .backward = LerpBackward,
                                .save_inputs = false});
const OpDef& kLerpTensor = RegisterOp(
    {.name = "lerp_tensor",
     .cpu = [](auto in, auto&) { return FusedKernel<Fused::kLerpTensor>(in, 0.0, false, "lerp"); },
     .backward = LerpTensorBackward});
// In place (not recorded by autograd, as add_): the no-grad updates of optimizers and weight averages.
const OpDef& kAddcmulInPlace = RegisterOp(
    {.name = "addcmul_",
     .cpu = [](auto in, auto& a) { return FusedKernel<Fused::kAddcmul>(in, a.GetDouble("value"), true, "addcmul_"); },
     .is_inplace = true});
const OpDef& kAddcdivInPlace = RegisterOp(
    {.name = "addcdiv_",
     .cpu = [](auto in, auto& a) { return FusedKernel<Fused::kAddcdiv>(in, a.GetDouble("value"), true, "addcdiv_"); },
     .is_inplace = true});
const OpDef& kLerpInPlace = RegisterOp(
    {.name = "lerp_", .cpu = [](auto in, auto& a) { return LerpKernel(in, a, true, "lerp_"); }, .is_inplace = true});
const OpDef& kLerpTensorInPlace = RegisterOp(
    {.name = "lerp_tensor_",
     .cpu = [](auto in, auto&) { return FusedKernel<Fused::kLerpTensor>(in, 0.0, true, "lerp_"); },
     .is_inplace = true});

}  // namespace

Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b) { return autograd::CallOp1(kWhere, {cond, a, b}); }
Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value) {
  return autograd::CallOp1(kMaskedFill, {x, mask}, Attrs().Set("value", value));
}
Tensor Eq(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kEq, {a, b}); }
Tensor Lt(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kLt, {a, b}); }
Tensor Gt(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kGt, {a, b}); }
Tensor Ne(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kNe, {a, b}); }
Tensor Le(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kLe, {a, b}); }
Tensor Ge(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kGe, {a, b}); }
Tensor Maximum(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kMaximum, {a, b}); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kMinimum, {a, b}); }

Tensor Addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return autograd::CallOp1(kAddcmul, {self, t1, t2}, Attrs().Set("value", value));
}
Tensor Addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return autograd::CallOp1(kAddcdiv, {self, t1, t2}, Attrs().Set("value", value));
}
Tensor Lerp(const Tensor& self, const Tensor& end, double weight) {
  return autograd::CallOp1(kLerp, {self, end}, Attrs().Set("weight", weight));
}
Tensor Lerp(const Tensor& self, const Tensor& end, const Tensor& weight) {
  return autograd::CallOp1(kLerpTensor, {self, end, weight});
}
void AddcmulInPlace(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  autograd::CallOp(kAddcmulInPlace, {self, t1, t2}, Attrs().Set("value", value));
}
void AddcdivInPlace(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  autograd::CallOp(kAddcdivInPlace, {self, t1, t2}, Attrs().Set("value", value));
}
void LerpInPlace(const Tensor& self, const Tensor& end, double weight) {
  autograd::CallOp(kLerpInPlace, {self, end}, Attrs().Set("weight", weight));
}
void LerpInPlace(const Tensor& self, const Tensor& end, const Tensor& weight) {
  autograd::CallOp(kLerpTensorInPlace, {self, end, weight});
}

}  // namespace tessel
