// core/ops/ternary.cc — selection by a boolean mask ("where", "masked_fill"), the comparisons that
// build masks ("eq", "lt", "gt") and the selections by comparison ("maximum", "minimum"): CPU kernels and
// backward formulas.
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

enum class Cmp { kEq, kLt, kGt };

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
      } else {
        return cx > cy;
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

// Both save only the mask: the values' gradients need their shapes alone (BackwardContext::input_sizes).
const OpDef& kWhere =
    RegisterOp({.name = "where", .cpu = WhereKernel, .backward = WhereBackward, .saved_inputs = {0}});
const OpDef& kMaskedFill =
    RegisterOp({.name = "masked_fill", .cpu = MaskedFillKernel, .backward = MaskedFillBackward, .saved_inputs = {1}});
const OpDef& kEq = RegisterOp({.name = "eq", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kEq>(in, "eq"); }});
const OpDef& kLt = RegisterOp({.name = "lt", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kLt>(in, "lt"); }});
const OpDef& kGt = RegisterOp({.name = "gt", .cpu = [](auto in, auto&) { return CompareKernel<Cmp::kGt>(in, "gt"); }});
const OpDef& kMaximum = RegisterOp({.name = "maximum",
                                   .cpu = [](auto in, auto&) { return MinMaxKernel<true>(in, "maximum"); },
                                   .backward = MinMaxBackward<true>});
const OpDef& kMinimum = RegisterOp({.name = "minimum",
                                   .cpu = [](auto in, auto&) { return MinMaxKernel<false>(in, "minimum"); },
                                   .backward = MinMaxBackward<false>});

}  // namespace

Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b) { return autograd::CallOp1(kWhere, {cond, a, b}); }
Tensor MaskedFill(const Tensor& x, const Tensor& mask, double value) {
  return autograd::CallOp1(kMaskedFill, {x, mask}, Attrs().Set("value", value));
}
Tensor Eq(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kEq, {a, b}); }
Tensor Lt(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kLt, {a, b}); }
Tensor Gt(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kGt, {a, b}); }
Tensor Maximum(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kMaximum, {a, b}); }
Tensor Minimum(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kMinimum, {a, b}); }

}  // namespace tessel
