// core/ops/elementwise.cc — add/sub/mul/div (broadcasting), scalar forms, add_, clone, *_like,
// sum_to_size: CPU kernels and backward formulas.
#include "core/ops/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/tensor/copy.h"
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

// Shape and per-operand strides with size-1 dims dropped and adjacent dims merged where every operand
// steps through the pair as through one dim (a broadcast operand's 0 strides merge with each other), so a
// broadcast [N, C, H, W] op [1, C, 1, 1] becomes [N, C, H·W] with strides (·, ·, 1) and (0, 1, 0).
template <size_t K>
void CollapseDims(const Shape& shape, const std::array<Shape, K>& strides, Shape& out_shape,
                  std::array<Shape, K>& out_strides) {
  out_shape.clear();
  for (Shape& s : out_strides) s.clear();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out_shape.empty();
    for (size_t k = 0; k < K && merge; ++k) merge = out_strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out_shape.back() *= shape[d];
      for (size_t k = 0; k < K; ++k) out_strides[k].back() = strides[k][d];
    } else {
      out_shape.push_back(shape[d]);
      for (size_t k = 0; k < K; ++k) out_strides[k].push_back(strides[k][d]);
    }
  }
}

enum class BinOp { kAdd, kSub, kMul, kDiv };

template <BinOp kOp, typename C>
inline C Apply(C a, C b) {
  if constexpr (kOp == BinOp::kAdd) return a + b;
  if constexpr (kOp == BinOp::kSub) return a - b;
  if constexpr (kOp == BinOp::kMul) return a * b;
  if constexpr (kOp == BinOp::kDiv) return a / b;
}

// out (contiguous, `shape`) = a op b for operands whose collapsed innermost dim is a run of at least
// 16 elements that each reads contiguously or as one repeated value (batch norm's per-channel scale and
// shift, a bias added to rows): a vectorizable loop per run, threads over runs. False (nothing written)
// for other layouts, which take the strided loop.
template <BinOp kOp, typename T, typename C>
bool BroadcastRowsKernel(const T* pa, const Shape& sa, const T* pb, const Shape& sb, T* po, const Shape& so,
                         const Shape& shape) {
  Shape dims;
  std::array<Shape, 3> st;
  CollapseDims<3>(shape, {so, sa, sb}, dims, st);
  if (dims.empty()) return false;
  const int64_t m = dims.back(), ia = st[1].back(), ib = st[2].back();
  if (m < 16 || ia > 1 || ib > 1 || st[0].back() != 1) return false;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < dims.size(); ++d) rows *= dims[d];
  ParallelFor(0, rows, std::max<int64_t>(1, kGrain / m), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oa = 0, ob = 0, oo = 0;
      for (int64_t d = static_cast<int64_t>(dims.size()) - 2, rest = r; d >= 0; --d) {
        const int64_t i = rest % dims[d];
        rest /= dims[d];
        oa += i * st[1][d], ob += i * st[2][d], oo += i * st[0][d];
      }
      const T* xa = pa + oa;
      const T* xb = pb + ob;
      T* xo = po + oo;
      if (ia == 1 && ib == 1) {
        for (int64_t i = 0; i < m; ++i) xo[i] = FromCompute<T>(Apply<kOp, C>(ToCompute(xa[i]), ToCompute(xb[i])));
      } else if (ia == 1) {
        const C bv = ToCompute(xb[0]);
        for (int64_t i = 0; i < m; ++i) xo[i] = FromCompute<T>(Apply<kOp, C>(ToCompute(xa[i]), bv));
      } else if (ib == 1) {
        const C av = ToCompute(xa[0]);
        for (int64_t i = 0; i < m; ++i) xo[i] = FromCompute<T>(Apply<kOp, C>(av, ToCompute(xb[i])));
      } else {
        const C v = Apply<kOp, C>(ToCompute(xa[0]), ToCompute(xb[0]));
        for (int64_t i = 0; i < m; ++i) xo[i] = FromCompute<T>(v);
      }
    }
  });
  return true;
}

template <BinOp kOp>
TensorList BinaryKernel(std::span<const Tensor> in, const Attrs&, const char* name) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  TESSEL_CHECK(a.dtype() == b.dtype(), name, ": dtype mismatch ", a.dtype(), " vs ", b.dtype(), " (shapes ",
               ShapeStr(a.sizes()), ", ", ShapeStr(b.sizes()), "); cast one side explicitly");
  const Shape shape = BroadcastShapes(a.sizes(), b.sizes(), name);
  Tensor out = Empty(shape, a.dtype(), a.device());
  const int64_t n = out.numel();
  if (n == 0) return {out};
  TESSEL_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    if constexpr (std::is_same_v<T, bool>) {
      // bool + bool is logical or and bool * bool logical and (torch's); torch refuses the other two
      if constexpr (kOp == BinOp::kSub) {
        TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": Subtraction, the `-` operator, with two bool tensors is not "
                    "supported (shapes ", ShapeStr(a.sizes()), ", ", ShapeStr(b.sizes()), "). Use the `^` or "
                    "`logical_xor()` operator instead.");  // torch's words, as the Python operators'
      } else if constexpr (kOp == BinOp::kDiv) {
        TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": not supported for bool tensors; cast to a floating dtype");
      }
    } else {
      if constexpr (kOp == BinOp::kDiv && std::is_integral_v<T>) {
        // An integer division by zero (or of the minimum by -1) traps (SIGFPE) and killed the process:
        // checked first, serially, so it is an error instead (torch raises for integer division by zero).
        const Tensor bc = DenseOrCopy(b);
        const T* q = static_cast<const T*>(bc.raw_data());
        const int64_t nb = bc.numel();
        for (int64_t i = 0; i < nb; ++i) {
          TESSEL_CHECK(ToCompute(q[i]) != C(0), name, ": integer division by zero (divisor ", DTypeName(b.dtype()), " ",
                       ShapeStr(b.sizes()), " is 0 at flat index ", i, "; dividend ", ShapeStr(a.sizes()),
                       "). HINT: cast to a floating dtype for IEEE division");
        }
        if (std::is_signed_v<C>) {
          bool neg_one = false;
          for (int64_t i = 0; i < nb && !neg_one; ++i) neg_one = ToCompute(q[i]) == C(-1);
          if (neg_one) {
            const Tensor ac = DenseOrCopy(a);
            const T* p = static_cast<const T*>(ac.raw_data());
            const int64_t na = ac.numel();
            for (int64_t i = 0; i < na; ++i) {
              TESSEL_CHECK(ToCompute(p[i]) != std::numeric_limits<C>::lowest(), name, ": integer overflow: the minimum ",
                           DTypeName(a.dtype()), " divided by -1 (dividend ", ShapeStr(a.sizes()), " at flat index ",
                           i, ")");
            }
          }
        }
      }
    }
    if (a.sizes() == shape && b.sizes() == shape && a.is_contiguous() && b.is_contiguous()) {
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) po[i] = FromCompute<T>(Apply<kOp, C>(ToCompute(pa[i]), ToCompute(pb[i])));
      });
    } else if (b.numel() == 1 && a.sizes() == shape && a.is_contiguous()) {
      const C bv = ToCompute(pb[0]);
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) po[i] = FromCompute<T>(Apply<kOp, C>(ToCompute(pa[i]), bv));
      });
    } else if (BroadcastRowsKernel<kOp, T, C>(pa, BroadcastStridesTo(a, shape), pb, BroadcastStridesTo(b, shape), po,
                                              out.strides(), shape)) {
    } else {
      const Shape sa = BroadcastStridesTo(a, shape);
      const Shape sb = BroadcastStridesTo(b, shape);
      const Shape so = out.strides();
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        ForEachStrided<3>(shape, {std::span<const int64_t>(so), std::span<const int64_t>(sa),
                                  std::span<const int64_t>(sb)},
                          [&](const int64_t* off) {
                            po[off[0]] = FromCompute<T>(Apply<kOp, C>(ToCompute(pa[off[1]]), ToCompute(pb[off[2]])));
                          },
                          s, e);
      });
    }
  });
  return {out};
}

// y = alpha * x + beta, elementwise (scalar ops); without beta y = alpha * x (no + 0: -3 * 0 stays -0.0, as
// torch's mul).
TensorList AffineKernel(const Tensor& x, double alpha, std::optional<double> beta, const char* name) {
  const Tensor xc = DenseOrCopy(x);
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  const int64_t n = out.numel();
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    if constexpr (std::is_same_v<T, bool>) {
      // a bool tensor with a Python bool (torch keeps bool): x + True is x or True, x * False is x and False
      const bool* px = static_cast<const bool*>(xc.raw_data());
      bool* po = static_cast<bool*>(out.raw_data());
      const double b = beta.value_or(0.0);
      for (int64_t i = 0; i < n; ++i) po[i] = (px[i] ? alpha : 0.0) + b != 0.0;
    } else {
      const T* px = static_cast<const T*>(xc.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      const C a = static_cast<C>(alpha);
      if (!beta) {
        ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
          for (int64_t i = s; i < e; ++i) po[i] = FromCompute<T>(ToCompute(px[i]) * a);
        });
        return;
      }
      const C b = static_cast<C>(*beta);
      ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) po[i] = FromCompute<T>(ToCompute(px[i]) * a + b);
      });
    }
  });
  return {out};
}

// dst[i] = f(dst[i], src[j]) over dst's elements, src broadcast to dst's shape (dense or strided), bumping dst's
// version.
template <typename T, typename F>
void CombineInPlace(const Tensor& dst, const Tensor& src, F f) {
  dst.impl()->storage().BumpVersion();
  const int64_t n = dst.numel();
  if (n == 0) return;
  T* pd = static_cast<T*>(dst.raw_data());
  const T* ps = static_cast<const T*>(src.raw_data());
  if (dst.is_contiguous() && src.is_contiguous() && src.sizes() == dst.sizes()) {
    ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) pd[i] = f(pd[i], ps[i]);
    });
    return;
  }
  const Shape& sd = dst.strides();
  const Shape ss = BroadcastStridesTo(src, dst.sizes());
  ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
    ForEachStrided<2>(dst.sizes(), {std::span<const int64_t>(sd), std::span<const int64_t>(ss)},
                      [&](const int64_t* off) { pd[off[0]] = f(pd[off[0]], ps[off[1]]); }, s, e);
  });
}

// dst += alpha * src (src broadcasts to dst).
TensorList AddInPlaceKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& dst = in[0];
  const Tensor& src = in[1];
  const double alpha = attrs.GetDouble("alpha", 1.0);
  CheckNoInternalOverlap(dst, "add_");
  TESSEL_CHECK(dst.dtype() == src.dtype(), "add_: dtype mismatch ", dst.dtype(), " vs ", src.dtype());
  CheckNoPartialOverlap(dst, src, "add_");
  const Shape b = BroadcastShapes(dst.sizes(), src.sizes(), "add_");
  TESSEL_CHECK(b == dst.sizes(), "add_: source shape ", ShapeStr(src.sizes()), " does not broadcast to ",
               ShapeStr(dst.sizes()));
  TESSEL_DISPATCH_FLOATING_TYPES(dst.dtype(), "add_", [&] {
    using T = scalar_t;
    const ComputeT<T> a = static_cast<ComputeT<T>>(alpha);
    CombineInPlace<T>(dst, src, [a](T d, T x) { return FromCompute<T>(std::fma(a, ToCompute(x), ToCompute(d))); });
  });
  return {dst};
}

// dst[i] = f(dst[i]) in one pass over dst's elements (dense or strided), bumping its version.
template <typename T, typename F>
void MapInPlace(const Tensor& dst, F f) {
  dst.impl()->storage().BumpVersion();
  T* pd = static_cast<T*>(dst.raw_data());
  const int64_t n = dst.numel();
  if (dst.is_contiguous()) {
    ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) pd[i] = f(pd[i]);
    });
    return;
  }
  const Shape& sd = dst.strides();
  ParallelFor(0, n, kGrain, [&](int64_t s, int64_t e) {
    ForEachStrided<1>(
        dst.sizes(), {std::span<const int64_t>(sd)}, [&](const int64_t* off) { pd[off[0]] = f(pd[off[0]]); }, s, e);
  });
}

// dst *= value in place, the values of mul_scalar's kernel (AffineKernel) in one pass (bool: through it).
TensorList MulScalarInPlaceKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& dst = in[0];
  CheckNoInternalOverlap(dst, "mul_");
  const double value = attrs.GetDouble("value");
  if (dst.dtype() == DType::kBool) {
    CopyInto(dst, AffineKernel(dst, value, std::nullopt, "mul_")[0]);
    return {dst};
  }
  TESSEL_DISPATCH_ALL_TYPES(dst.dtype(), "mul_", [&] {
    using T = scalar_t;
    if constexpr (!std::is_same_v<T, bool>) {
      const ComputeT<T> a = static_cast<ComputeT<T>>(value);
      MapInPlace<T>(dst, [a](T x) { return FromCompute<T>(ToCompute(x) * a); });
    }
  });
  return {dst};
}

// The in-place number kernels of a floating dst (`what` names the op in the refusal of other dtypes): dst[i] =
// f(dst[i]) in one pass, f = make(T{}) for dst's element type T.
template <typename Make>
TensorList FloatingMapInPlace(const Tensor& dst, const char* name, const char* what, Make make) {
  CheckNoInternalOverlap(dst, name);
  TESSEL_CHECK(IsFloating(dst.dtype()), name, ": ", what, " needs a floating tensor, got ", dst.dtype(), " of shape ",
               ShapeStr(dst.sizes()));
  TESSEL_DISPATCH_FLOATING_TYPES(dst.dtype(), name, [&] { MapInPlace<scalar_t>(dst, make(scalar_t{})); });
  return {dst};
}

// dst += value · alpha in place for floating dst: torch's fmadd(value, alpha, x), value and alpha rounded to the
// compute type first (alpha 1: x + value, add_scalar's values).
TensorList AddScalarInPlaceKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const double value = attrs.GetDouble("value"), alpha = attrs.GetDouble("alpha", 1.0);
  return FloatingMapInPlace(in[0], "add_", "an in-place number add", [&](auto tag) {
    using T = decltype(tag);
    using C = ComputeT<T>;
    const C b = static_cast<C>(value), a = static_cast<C>(alpha);
    return [b, a](T x) { return FromCompute<T>(std::fma(b, a, ToCompute(x))); };
  });
}

// dst = dst op src in place (mul_ / div_ by a tensor of dst's floating dtype broadcasting to it): the values of
// the out-of-place mul / div, one pass.
template <BinOp kOp>
TensorList BinaryInPlaceKernel(std::span<const Tensor> in, const char* name) {
  const Tensor& dst = in[0];
  const Tensor& src = in[1];
  CheckNoInternalOverlap(dst, name);
  TESSEL_CHECK(dst.dtype() == src.dtype() && IsFloating(dst.dtype()), name,
               ": expected floating tensors of one dtype, got ", dst.dtype(), " and ", src.dtype(), " (shapes ",
               ShapeStr(dst.sizes()), ", ", ShapeStr(src.sizes()), ")");
  const Shape shape = BroadcastShapes(dst.sizes(), src.sizes(), name);
  TESSEL_CHECK(shape == dst.sizes(), name, ": output with shape ", ShapeStr(dst.sizes()),
               " doesn't match the broadcast shape ", ShapeStr(shape));
  CheckNoPartialOverlap(dst, src, name);
  TESSEL_DISPATCH_FLOATING_TYPES(dst.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    CombineInPlace<T>(dst, src, [](T d, T x) { return FromCompute<T>(Apply<kOp, C>(ToCompute(d), ToCompute(x))); });
  });
  return {dst};
}

// dst /= value in place for floating dst: x / value in the compute type (the 16-bit floats in float32), the
// values of a division by a number.
TensorList DivScalarInPlaceKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const double value = attrs.GetDouble("value");
  return FloatingMapInPlace(in[0], "div_", "an in-place true division", [&](auto tag) {
    using T = decltype(tag);
    const ComputeT<T> v = static_cast<ComputeT<T>>(value);
    return [v](T x) { return FromCompute<T>(ToCompute(x) / v); };
  });
}

// sum_to_size of a contiguous x: x's dims collapsed into alternating groups, each either kept (the
// output has it) or reduced (size 1 in the output, or absent), so the broadcasting backward's
// reductions become loops over contiguous runs: a reduced innermost group sums runs of its length into
// one output (batch norm's [N, C, H, W] -> [1, C, 1, 1]), a kept innermost group adds whole rows
// (a bias gradient's [B, T, C] -> [C]). Threads split the outputs only, so each output is summed in
// the same order whatever the thread count. (The strided loop below ran ~1 ns per element, one
// thread: 27% of a small CNN's training step was this op.)
template <typename T, typename A>
void SumContiguousToSize(const T* px, const Shape& x_shape, const Shape& x_strides, const Shape& acc_strides, A* pa) {
  struct Group {
    bool kept;
    int64_t size, stride;  // stride: x's, in elements
  };
  // Collapsed against the accumulator's broadcast strides (0 on reduced dims), x's dims fall into
  // alternating kept / reduced groups.
  Shape dims;
  std::array<Shape, 2> st;
  CollapseDims<2>(x_shape, {x_strides, acc_strides}, dims, st);
  if (dims.empty()) {  // one element
    pa[0] += static_cast<A>(ToCompute(px[0]));
    return;
  }
  std::vector<Group> groups;
  for (size_t i = 0; i < dims.size(); ++i) groups.push_back({st[1][i] != 0, dims[i], st[0][i]});
  const Group inner = groups.back();
  groups.pop_back();
  std::vector<Group> kept, reduced;  // outer groups, outermost first
  for (const Group& g : groups) (g.kept ? kept : reduced).push_back(g);
  int64_t outer_outputs = 1, combos = 1;
  for (const Group& g : kept) outer_outputs *= g.size;
  for (const Group& g : reduced) combos *= g.size;
  // x offset of outer output o (its kept-group indices) and of reduced combination r.
  auto offset = [](const std::vector<Group>& gs, int64_t idx) {
    int64_t off = 0;
    for (size_t i = gs.size(); i-- > 0;) off += (idx % gs[i].size) * gs[i].stride, idx /= gs[i].size;
    return off;
  };
  const int64_t m = inner.size;
  if (!inner.kept) {  // each output: combos runs of m contiguous elements
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, combos * m));
    ParallelFor(0, outer_outputs, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const int64_t base = offset(kept, o);
        A lanes[8] = {};
        A tail = 0;
        for (int64_t r = 0; r < combos; ++r) {
          const T* run = px + base + offset(reduced, r);
          int64_t i = 0;
          for (; i + 8 <= m; i += 8) {
            for (int l = 0; l < 8; ++l) lanes[l] += static_cast<A>(ToCompute(run[i + l]));
          }
          for (; i < m; ++i) tail += static_cast<A>(ToCompute(run[i]));
        }
        pa[o] += ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7])) + tail;
      }
    });
    return;
  }
  // kept innermost: outputs [outer_outputs, m], each row the sum over combos rows; threads take column
  // blocks of a row.
  constexpr int64_t kColumns = 256;
  const int64_t blocks = (m + kColumns - 1) / kColumns;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, combos * std::min(m, kColumns)));
  ParallelFor(0, outer_outputs * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / blocks, c0 = item % blocks * kColumns, c1 = std::min(m, c0 + kColumns);
      const int64_t base = offset(kept, o);
      A* out = pa + o * m;
      for (int64_t r = 0; r < combos; ++r) {
        const T* row = px + base + offset(reduced, r);
        for (int64_t c = c0; c < c1; ++c) out[c] += static_cast<A>(ToCompute(row[c]));
      }
    }
  });
}

TensorList SumToSizeKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const std::vector<int64_t>& shape = attrs.GetInts("shape");
  const Shape check = BroadcastShapes(shape, x.sizes(), "sum_to_size");
  TESSEL_CHECK(check == x.sizes(), "sum_to_size: shape ", ShapeStr(shape), " does not broadcast to ",
               ShapeStr(x.sizes()));
  // A float64 accumulator for every floating dtype: the rows reduced into one output are summed one after
  // another (a bias gradient over 1M rows was 1e-2 off in float32; torch's cascade 6e-7).
  Tensor acc = Zeros(shape, DType::kFloat64, x.device());
  const Shape sa = BroadcastStridesTo(acc, x.sizes());
  const Shape& sx = x.strides();
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), "sum_to_size", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    using A = double;
    const T* px = static_cast<const T*>(x.raw_data());
    A* pa = static_cast<A*>(acc.raw_data());
    static_assert(std::is_floating_point_v<C>, "sum_to_size: floating dtypes");
    if (x.is_contiguous() && x.numel() > 0) return SumContiguousToSize<T, A>(px, x.sizes(), sx, sa, pa);
    ForEachStrided<2>(x.sizes(), {std::span<const int64_t>(sa), std::span<const int64_t>(sx)},
                      [&](const int64_t* off) { pa[off[0]] += static_cast<A>(ToCompute(px[off[1]])); });
  });
  if (acc.dtype() == x.dtype()) return {acc};
  Tensor out = Empty(shape, x.dtype(), x.device());
  CopyInto(out, acc);
  return {out};
}

TensorList CloneKernel(std::span<const Tensor> in, const Attrs&) {
  Tensor out = Empty(in[0].sizes(), in[0].dtype(), in[0].device());
  CopyInto(out, in[0]);
  return {out};
}

// ---- backward formulas -------------------------------------------------------------------------

Tensor ReduceTo(const Tensor& g, const Shape& shape) { return g.sizes() == shape ? g : SumToSize(g, shape); }
Tensor Reduce(const Tensor& g, const Tensor& like) { return ReduceTo(g, like.sizes()); }

// add and sub save no inputs (their gradients need only the input shapes), as torch: `b.add_(a)` with `a` a
// view of b's base must not make a's saved copy stale.
TensorList AddBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {c.needs_input_grad[0] ? ReduceTo(g, c.input_sizes[0]) : Tensor(),
          c.needs_input_grad[1] ? ReduceTo(g, c.input_sizes[1]) : Tensor()};
}
TensorList SubBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {c.needs_input_grad[0] ? ReduceTo(g, c.input_sizes[0]) : Tensor(),
          c.needs_input_grad[1] ? ReduceTo(MulScalar(g, -1.0), c.input_sizes[1]) : Tensor()};
}
TensorList MulBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {c.needs_input_grad[0] ? Reduce(Mul(g, c.inputs[1]), c.inputs[0]) : Tensor(),
          c.needs_input_grad[1] ? Reduce(Mul(g, c.inputs[0]), c.inputs[1]) : Tensor()};
}
TensorList DivBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor ga, gb;
  if (c.needs_input_grad[0]) ga = Reduce(Div(g, b), a);
  // d(a/b)/db = -(a/b)/b, as torch: -(g·a)/(b·b) overflowed or underflowed in b·b (fp16 divisors > 256 gave
  // 0, float32 a = b = 1e-30 gave -inf).
  if (c.needs_input_grad[1]) gb = Reduce(MulScalar(Div(Mul(g, Div(a, b)), b), -1.0), b);
  return {ga, gb};
}

const OpDef& kAdd = RegisterOp({.name = "add",
                                .cpu = [](auto in, auto& a) { return BinaryKernel<BinOp::kAdd>(in, a, "add"); },
                                .backward = AddBackward,
                                .save_inputs = false});
const OpDef& kSub = RegisterOp({.name = "sub",
                                .cpu = [](auto in, auto& a) { return BinaryKernel<BinOp::kSub>(in, a, "sub"); },
                                .backward = SubBackward,
                                .save_inputs = false});
const OpDef& kMul = RegisterOp({.name = "mul",
                                .cpu = [](auto in, auto& a) { return BinaryKernel<BinOp::kMul>(in, a, "mul"); },
                                .backward = MulBackward,
                                .saved_input_readers = {{1}, {0}}});
const OpDef& kDiv = RegisterOp({.name = "div",
                                .cpu = [](auto in, auto& a) { return BinaryKernel<BinOp::kDiv>(in, a, "div"); },
                                .backward = DivBackward});
const OpDef& kAddScalar = RegisterOp(
    {.name = "add_scalar",
     .cpu = [](auto in, auto& a) { return AffineKernel(in[0], 1.0, a.GetDouble("value"), "add_scalar"); },
     .backward = [](const BackwardContext& c) -> TensorList { return {c.grad_outputs[0]}; },
     .save_inputs = false});
const OpDef& kMulScalar = RegisterOp(
    {.name = "mul_scalar",
     .cpu = [](auto in, auto& a) { return AffineKernel(in[0], a.GetDouble("value"), std::nullopt, "mul_scalar"); },
     .backward = [](const BackwardContext& c) -> TensorList {
       return {MulScalar(c.grad_outputs[0], c.attrs.GetDouble("value"))};
     },
     .save_inputs = false});
const OpDef& kAddInPlace = RegisterOp({.name = "add_", .cpu = AddInPlaceKernel, .is_inplace = true});
const OpDef& kMulScalarInPlace = RegisterOp({.name = "mul_", .cpu = MulScalarInPlaceKernel, .is_inplace = true});
const OpDef& kAddScalarInPlace =
    RegisterOp({.name = "add_scalar_", .cpu = AddScalarInPlaceKernel, .is_inplace = true});
const OpDef& kMulInPlace = RegisterOp(
    {.name = "mul_tensor_", .cpu = [](auto in, auto&) { return BinaryInPlaceKernel<BinOp::kMul>(in, "mul_"); },
     .is_inplace = true});
const OpDef& kDivInPlace = RegisterOp(
    {.name = "div_tensor_", .cpu = [](auto in, auto&) { return BinaryInPlaceKernel<BinOp::kDiv>(in, "div_"); },
     .is_inplace = true});
const OpDef& kDivScalarInPlace =
    RegisterOp({.name = "div_scalar_", .cpu = DivScalarInPlaceKernel, .is_inplace = true});
const OpDef& kClone = RegisterOp({.name = "clone",
                                  .cpu = CloneKernel,
                                  .backward = [](const BackwardContext& c) -> TensorList { return {c.grad_outputs[0]}; },
                                  .save_inputs = false});
const OpDef& kOnesLike = RegisterOp(
    {.name = "ones_like",
     .cpu = [](auto in, auto&) -> TensorList { return {Ones(in[0].sizes(), in[0].dtype(), in[0].device())}; },
     .constant_outputs = true});
const OpDef& kZerosLike = RegisterOp(
    {.name = "zeros_like",
     .cpu = [](auto in, auto&) -> TensorList { return {Zeros(in[0].sizes(), in[0].dtype(), in[0].device())}; },
     .constant_outputs = true});
const OpDef& kSumToSize = RegisterOp(
    {.name = "sum_to_size",
     .cpu = SumToSizeKernel,
     .backward = [](const BackwardContext& c) -> TensorList {
       // Adjoint of a sum over broadcast dims: broadcast the gradient back (materialized).
       Tensor z = ZerosLike(c.inputs[0]);
       return {Add(z, c.grad_outputs[0])};
     }});

}  // namespace

namespace {

// torch's is_non_overlapping_and_dense: the elements fill exactly numel slots, i.e. the strides are a contiguous
// layout's in some order of the dims (a transpose of a contiguous tensor is; a slice with a step is not).
bool NonOverlappingAndDense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

}  // namespace

// torch's assert_no_partial_overlap: for non-overlapping dense operands of one storage, the same elements at the
// same strides (x.add_(x)) are safe and any other overlap of their byte ranges is refused (x.add_(x.t()) too);
// other layouts are "too hard" and pass, as in torch.
void CheckNoPartialOverlap(const Tensor& dst, const Tensor& src, const char* op) {
  if (dst.is_distributed() || src.is_distributed() || dst.numel() == 0 || src.numel() == 0) return;
  if (!dst.impl()->storage().defined() || dst.impl()->storage().data() != src.impl()->storage().data()) return;
  if (!NonOverlappingAndDense(dst) || !NonOverlappingAndDense(src)) return;
  const char* a = static_cast<const char*>(dst.raw_data());
  const char* b = static_cast<const char*>(src.raw_data());
  const char* a_end = a + dst.numel() * ElementSize(dst.dtype());
  const char* b_end = b + src.numel() * ElementSize(src.dtype());
  const bool full = a == b && a_end == b_end && dst.strides() == src.strides();
  TESSEL_CHECK(full || !(a < b_end && b < a_end), op, ": unsupported operation: some elements of the input tensor "
               "and the written-to tensor refer to a single memory location (written-to shape ", ShapeStr(dst.sizes()),
               ", input shape ", ShapeStr(src.sizes()), "). Please clone() the tensor.");
}

// torch's has_internal_overlap test: a written tensor with a zero stride on a dim of size > 1 (an expand()ed
// view) writes one memory location several times, so dst += src would add src once per alias (silently).
void CheckNoInternalOverlap(const Tensor& dst, const char* op) {
  for (size_t d = 0; d < dst.sizes().size(); ++d) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !(dst.sizes()[d] > 1 && dst.strides()[d] == 0), op,
                      ": unsupported operation: more than one element of the written-to tensor refers to a single "
                      "memory location (shape ", ShapeStr(dst.sizes()), ", strides ", ShapeStr(dst.strides()),
                      "). Please clone() the tensor before performing the operation.");
  }
}

Tensor Add(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kAdd, {a, b}); }
Tensor Sub(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kSub, {a, b}); }
Tensor Mul(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kMul, {a, b}); }
Tensor Div(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kDiv, {a, b}); }
Tensor AddScalar(const Tensor& a, double value) {
  return autograd::CallOp1(kAddScalar, {a}, Attrs().Set("value", value));
}
Tensor MulScalar(const Tensor& a, double value) {
  return autograd::CallOp1(kMulScalar, {a}, Attrs().Set("value", value));
}
void AddInPlace(const Tensor& dst, const Tensor& src, double alpha) {
  autograd::CallOp(kAddInPlace, {dst, src}, Attrs().Set("alpha", alpha));
}
void MulScalarInPlace(const Tensor& dst, double value) {
  autograd::CallOp(kMulScalarInPlace, {dst}, Attrs().Set("value", value));
}
void AddScalarInPlace(const Tensor& dst, double value, double alpha) {
  autograd::CallOp(kAddScalarInPlace, {dst}, Attrs().Set("value", value).Set("alpha", alpha));
}
void MulInPlace(const Tensor& dst, const Tensor& src) { autograd::CallOp(kMulInPlace, {dst, src}); }
void DivInPlace(const Tensor& dst, const Tensor& src) { autograd::CallOp(kDivInPlace, {dst, src}); }
void DivScalarInPlace(const Tensor& dst, double value) {
  autograd::CallOp(kDivScalarInPlace, {dst}, Attrs().Set("value", value));
}
Tensor Clone(const Tensor& x) { return autograd::CallOp1(kClone, {x}); }
Tensor OnesLike(const Tensor& x) { return autograd::CallOp1(kOnesLike, {x}); }
Tensor ZerosLike(const Tensor& x) { return autograd::CallOp1(kZerosLike, {x}); }
Tensor SumToSize(const Tensor& x, std::span<const int64_t> shape) {
  if (x.sizes() == Shape(shape.begin(), shape.end())) return x;
  return autograd::CallOp1(kSumToSize, {x}, Attrs().Set("shape", std::vector<int64_t>(shape.begin(), shape.end())));
}

}  // namespace tessel
