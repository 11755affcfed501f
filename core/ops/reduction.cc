// core/ops/reduction.cc — "sum", "mean", "amax", "max" (values + int64 indices) and "norm" over dims:
// CPU kernels and backward formulas, plus the backward ops "sum_backward" (the gradient broadcast back
// over the reduced dims, times a scale) and "max_backward" (the gradient scattered to the argmax).
//
// Invariant: every kernel sees its input as a row-major [A, R, K] block with the reduced dims in R — a
// contiguous input whose reduced dims are adjacent (after dropping size-1 dims) is used in place, any
// other input is copied once with the reduced dims last. R is reduced per output element: K == 1 is a
// pairwise (8-lane) sum of one contiguous run (a single 8-lane pass for max-like ops, where order does
// not matter); K > 1 walks rows of up to kCols contiguous columns, summing blocks of kRowBlock rows
// before joining the running total (so float error grows with kRowBlock + R / kRowBlock, not R). Few
// outputs with a long R split R across threads. Accumulation is in ComputeT: fp64 for float64, fp32 for
// float32/bf16/fp16, int64 for integer sums (whose output is int64, like torch).
//
// Example:
//   Tensor s = Sum(x_BTC, {0, 1});                 // [C]: the [A=1, R=B*T, K=C] column path
//   auto [v, i] = Max(logits_BV, -1);              // [B] values and int64 indices
//   Tensor g_BTC = autograd::CallOp1(GetOp("sum_backward"), {g_C}, Attrs().Set("shape", x_BTC.sizes())
//       .Set("dims", std::vector<int64_t>{0, 1}).Set("keepdim", false).Set("scale", 1.0));  // Sum's adjoint
#include "core/ops/reduction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/strided_loop.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 15;     // input elements per task
constexpr int64_t kCols = 256;          // contiguous columns per task when K > 1
constexpr int64_t kRowBlock = 64;       // rows combined into a block before joining the total (K > 1)
constexpr int64_t kPairwiseLeaf = 128;  // leaf length of the pairwise reduction (K == 1)

// Which dims a reduction removes, and the output shape.
struct Plan {
  std::vector<char> reduced;  // per input dim
  Shape out_shape;
  int64_t inner = 1;  // elements reduced into each output element
};

Plan MakePlan(const Shape& sizes, const std::vector<int64_t>& dims, bool keepdim, const char* op) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  Plan plan;
  plan.reduced.assign(nd, dims.empty() ? 1 : 0);
  for (int64_t d : dims) {
    const int64_t k = NormalizeDim(d, nd, op);
    if (nd == 0) continue;  // a 0-d tensor accepts dim 0 / -1, like torch
    TESSEL_CHECK(!plan.reduced[k], op, ": dim ", k, " appears multiple times in the list of dims ", ShapeStr(dims),
                 " (input shape ", ShapeStr(sizes), ")");
    plan.reduced[k] = 1;
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (plan.reduced[d]) plan.inner *= sizes[d];
    if (!plan.reduced[d]) plan.out_shape.push_back(sizes[d]);
    if (plan.reduced[d] && keepdim) plan.out_shape.push_back(1);
  }
  return plan;
}

// x's data as a row-major [A, R, K] block with the reduced dims in R.
struct Layout {
  Tensor data;
  int64_t a = 1, r = 1, k = 1;
};

Layout Arrange(const Tensor& x, const std::vector<char>& reduced) {
  Layout l{x};
  bool ok = x.is_contiguous();
  int state = 0;  // 0: before the reduced dims, 1: inside them, 2: after them
  for (int64_t d = 0; d < x.dim() && ok; ++d) {
    const int64_t s = x.size(d);
    if (s == 1) continue;
    if (reduced[d]) {
      ok = state != 2;
      state = 1;
      l.r *= s;
    } else if (state == 0) {
      l.a *= s;
    } else {
      state = 2;
      l.k *= s;
    }
  }
  if (ok) return l;
  // One copy into [kept dims..., reduced dims...] order: then A = kept elements, R = reduced, K = 1.
  std::vector<int64_t> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (reduced[d] == pass) order.push_back(d);
    }
  }
  Shape sizes;
  for (int64_t d : order) sizes.push_back(x.size(d));
  Tensor buf = Empty(sizes, x.dtype(), x.device());
  const Shape cs = ContiguousStrides(sizes);
  Shape strides(x.dim());
  for (size_t i = 0; i < order.size(); ++i) strides[order[i]] = cs[i];
  CopyInto(MakeView(buf, x.sizes(), strides, 0), x);
  l = Layout{buf, 1, 1, 1};
  for (int64_t d = 0; d < x.dim(); ++d) (reduced[d] ? l.r : l.a) *= x.size(d);
  return l;
}

template <typename A>
inline bool IsNan(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

enum class Red { kSum, kMax, kNorm1, kNorm2, kNormInf, kNormP };

template <Red kOp, typename Acc>
struct Reducer {
  using A = Acc;
  static constexpr bool kMaxLike = kOp == Red::kMax || kOp == Red::kNormInf;
  A p = 2;  // the order of kNormP
  static A Init() {
    if constexpr (kOp == Red::kMax && std::numeric_limits<A>::has_infinity) return -std::numeric_limits<A>::infinity();
    if constexpr (kOp == Red::kMax) return std::numeric_limits<A>::lowest();
    return A(0);
  }
  A Map(A v) const {
    if constexpr (kOp == Red::kNorm1 || kOp == Red::kNormInf) return std::abs(v);
    if constexpr (kOp == Red::kNorm2) return v * v;
    if constexpr (kOp == Red::kNormP) return std::pow(std::abs(v), p);
    return v;
  }
  static A Combine(A a, A b) {  // max-like ops propagate NaN, like torch
    if constexpr (kMaxLike) return ((a > b) | IsNan(a)) ? a : b;
    return a + b;
  }
  A Finish(A a, double scale) const {
    if constexpr (kOp == Red::kNorm2) return std::sqrt(a);
    if constexpr (kOp == Red::kNormP) return std::pow(a, A(1) / p);
    if constexpr (kOp == Red::kSum && std::is_floating_point_v<A>) return a * static_cast<A>(scale);
    return a;
  }
};

// Max-like reduction of p[0, n): order does not matter, so one pass with 8 lanes of plain max (which
// vectorizes) and 8 lanes remembering a NaN, instead of a NaN-aware select the compiler keeps scalar.
template <typename T, typename Rd>
typename Rd::A MaxRun(const T* p, int64_t n, const Rd& r) {
  using A = typename Rd::A;
  A lane[8], nan[8];
  std::fill(lane, lane + 8, Rd::Init());
  std::fill(nan, nan + 8, A(0));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const A v = r.Map(static_cast<A>(ToCompute(p[i + j])));
      lane[j] = lane[j] > v ? lane[j] : v;
      nan[j] = IsNan(v) ? v : nan[j];
    }
  }
  for (; i < n; ++i) lane[0] = Rd::Combine(lane[0], r.Map(static_cast<A>(ToCompute(p[i]))));
  A m = lane[0];
  for (int j = 1; j < 8; ++j) m = Rd::Combine(m, lane[j]);
  for (int j = 0; j < 8; ++j) m = IsNan(nan[j]) ? nan[j] : m;
  return m;
}

// Pairwise reduction of p[0, n) with 8 independent lanes at the leaves.
template <typename T, typename Rd>
typename Rd::A ReduceRun(const T* p, int64_t n, const Rd& r) {
  using A = typename Rd::A;
  if constexpr (Rd::kMaxLike) return MaxRun(p, n, r);
  if (n > kPairwiseLeaf) {
    const int64_t half = (n / 2 + 7) / 8 * 8;
    return Rd::Combine(ReduceRun(p, half, r), ReduceRun(p + half, n - half, r));
  }
  A lane[8];
  std::fill(lane, lane + 8, Rd::Init());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] = Rd::Combine(lane[j], r.Map(static_cast<A>(ToCompute(p[i + j]))));
  }
  for (; i < n; ++i) lane[0] = Rd::Combine(lane[0], r.Map(static_cast<A>(ToCompute(p[i]))));
  return Rd::Combine(Rd::Combine(Rd::Combine(lane[0], lane[1]), Rd::Combine(lane[2], lane[3])),
                     Rd::Combine(Rd::Combine(lane[4], lane[5]), Rd::Combine(lane[6], lane[7])));
}

// dst[0, m) = reduction over rows [r0, r1) of columns [k0, k0 + m) of slab `a` of [A, R, K] data.
template <typename T, typename Rd>
void ReduceSlab(const T* p, int64_t R, int64_t K, int64_t a, int64_t k0, int64_t m, int64_t r0, int64_t r1,
                const Rd& r, typename Rd::A* dst) {
  using A = typename Rd::A;
  const T* base = p + a * R * K + k0;
  if (K == 1) {
    dst[0] = ReduceRun(base + r0, r1 - r0, r);
    return;
  }
  // Block totals join by cascade (a binary counter of partial totals: level l holds 2^l blocks), so the float
  // error grows with kRowBlock + log2(R / kRowBlock) instead of R / kRowBlock: [5M, 2].sum(0) in float32 was
  // 3.7e-4 off (3140 ulps) when the totals joined one after another (torch's cascade: 9e-7).
  auto reduce_rows = [&](int64_t rb, int64_t re, A* out) {  // out[0, m) = rows [rb, re)
    std::fill(out, out + m, Rd::Init());
    for (int64_t i = rb; i < re; ++i) {
      const T* row = base + i * K;
      for (int64_t k = 0; k < m; ++k) out[k] = Rd::Combine(out[k], r.Map(static_cast<A>(ToCompute(row[k]))));
    }
  };
  if (r1 - r0 <= kRowBlock) return reduce_rows(r0, r1, dst);  // one block: no cascade, no allocation
  A blk[kCols];
  std::vector<A> level;     // level l's partial total at [l * m, (l + 1) * m)
  std::vector<bool> full;   // whether level l holds one
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    reduce_rows(rb, std::min(r1, rb + kRowBlock), blk);
    size_t l = 0;
    for (; l < full.size() && full[l]; ++l) {  // carry: merge with each full level
      for (int64_t k = 0; k < m; ++k) blk[k] = Rd::Combine(level[l * m + k], blk[k]);
      full[l] = false;
    }
    if (l == full.size()) full.push_back(false), level.resize(full.size() * m);
    std::copy(blk, blk + m, level.begin() + static_cast<int64_t>(l) * m);
    full[l] = true;
  }
  std::fill(dst, dst + m, Rd::Init());
  for (size_t l = full.size(); l-- > 0;) {  // the largest (earliest) partial first
    if (!full[l]) continue;
    for (int64_t k = 0; k < m; ++k) dst[k] = Rd::Combine(dst[k], level[l * m + k]);
  }
}

// acc[A * K] = unfinished reduction of [A, R, K] data over R.
template <typename T, typename Rd>
void ReduceARK(const T* p, const Layout& l, const Rd& r, typename Rd::A* acc) {
  using A = typename Rd::A;
  const int64_t col_blocks = (l.k + kCols - 1) / kCols;
  const int64_t tasks = l.a * col_blocks;
  auto run = [&](int64_t t, int64_t r0, int64_t r1, A* out) {
    const int64_t a = t / col_blocks, k0 = (t % col_blocks) * kCols;
    ReduceSlab(p, l.r, l.k, a, k0, std::min(kCols, l.k - k0), r0, r1, r, out + a * l.k + k0);
  };
  const int64_t threads = NumThreads();
  if (tasks >= threads || l.a * l.r * l.k < 2 * kGrain) {
    const int64_t task_elems = std::max<int64_t>(1, l.r * std::min(l.k, kCols));
    ParallelFor(0, tasks, std::max<int64_t>(1, kGrain / task_elems), [&](int64_t s, int64_t e) {
      for (int64_t t = s; t < e; ++t) run(t, 0, l.r, acc);
    });
    return;
  }
  // Few outputs and a long R (e.g. [1M, 4] → [4]): each thread reduces a range of rows, then join.
  const int64_t parts = std::min<int64_t>(threads, (l.r + kRowBlock - 1) / kRowBlock);
  const int64_t outs = l.a * l.k;
  std::vector<A> partial(parts * outs);
  ParallelFor(0, parts, 1, [&](int64_t s, int64_t e) {
    for (int64_t q = s; q < e; ++q) {
      for (int64_t t = 0; t < tasks; ++t) run(t, l.r * q / parts, l.r * (q + 1) / parts, partial.data() + q * outs);
    }
  });
  for (int64_t i = 0; i < outs; ++i) {
    A v = Rd::Init();
    for (int64_t q = 0; q < parts; ++q) v = Rd::Combine(v, partial[q * outs + i]);
    acc[i] = v;
  }
}

void CheckNonEmpty(const Tensor& x, const Plan& plan, const std::vector<int64_t>& dims, const char* op) {
  TESSEL_CHECK(plan.inner > 0 || NumElements(plan.out_shape) == 0, op, ": cannot reduce over a zero-size dim (input ",
               ShapeStr(x.sizes()), ", dims ", ShapeStr(dims), "): the reduction has no identity");
}

template <Red kOp>
Tensor ReduceImpl(const Tensor& x, const Plan& plan, double p, double scale, const char* name) {
  const Layout l = Arrange(x, plan.reduced);
  Tensor out;
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), name, [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    if constexpr (std::is_same_v<T, bool> && kOp != Red::kSum && kOp != Red::kMax) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": not supported for bool tensors (shape ", ShapeStr(x.sizes()),
                  ")");
    } else if constexpr (!std::is_floating_point_v<C> && kOp != Red::kSum && kOp != Red::kMax) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": expected a floating dtype, got ", DTypeName(x.dtype()));
    } else {
      constexpr bool kIntSum = kOp == Red::kSum && !std::is_floating_point_v<C>;
      using A = std::conditional_t<kIntSum, int64_t, std::conditional_t<std::is_same_v<C, bool>, uint8_t, C>>;
      using TO = std::conditional_t<kIntSum, int64_t, T>;  // integer sums give int64, like torch
      out = Empty(plan.out_shape, DTypeOf<TO>::value, x.device());
      Reducer<kOp, A> r{static_cast<A>(p)};
      std::vector<A> acc(l.a * l.k);
      ReduceARK(static_cast<const T*>(l.data.raw_data()), l, r, acc.data());
      TO* po = static_cast<TO*>(out.raw_data());
      ParallelFor(0, static_cast<int64_t>(acc.size()), kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) po[i] = FromCompute<TO>(r.Finish(acc[i], scale));
      });
    }
  });
  return out;
}

TensorList SumKernel(std::span<const Tensor> in, const Attrs& a) {
  const Plan plan = MakePlan(in[0].sizes(), a.GetInts("dims"), a.GetBool("keepdim"), "sum");
  return {ReduceImpl<Red::kSum>(in[0], plan, 0, 1.0, "sum")};
}

TensorList MeanKernel(std::span<const Tensor> in, const Attrs& a) {
  const Plan plan = MakePlan(in[0].sizes(), a.GetInts("dims"), a.GetBool("keepdim"), "mean");
  TESSEL_CHECK(IsFloating(in[0].dtype()), "mean: expected a floating dtype, got ", in[0].dtype(), " (shape ",
               ShapeStr(in[0].sizes()), "); Cast() first");
  return {ReduceImpl<Red::kSum>(in[0], plan, 0, 1.0 / static_cast<double>(plan.inner), "mean")};
}

TensorList AmaxKernel(std::span<const Tensor> in, const Attrs& a) {
  const Plan plan = MakePlan(in[0].sizes(), a.GetInts("dims"), a.GetBool("keepdim"), "amax");
  CheckNonEmpty(in[0], plan, a.GetInts("dims"), "amax");
  return {ReduceImpl<Red::kMax>(in[0], plan, 0, 1.0, "amax")};
}

TensorList NormKernel(std::span<const Tensor> in, const Attrs& a) {
  const Plan plan = MakePlan(in[0].sizes(), a.GetInts("dims"), a.GetBool("keepdim"), "norm");
  const double p = a.GetDouble("p");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, p > 0, "norm: p = ", p, " is not supported (p > 0 or inf)");
  TESSEL_CHECK(IsFloating(in[0].dtype()), "norm: expected a floating dtype, got ", in[0].dtype());
  if (p == 1) return {ReduceImpl<Red::kNorm1>(in[0], plan, p, 1.0, "norm")};
  if (p == 2) return {ReduceImpl<Red::kNorm2>(in[0], plan, p, 1.0, "norm")};
  if (std::isinf(p)) return {ReduceImpl<Red::kNormInf>(in[0], plan, p, 1.0, "norm")};
  return {ReduceImpl<Red::kNormP>(in[0], plan, p, 1.0, "norm")};
}

// Running argmax step, branch-free: take v at i if it is larger, or if it is the first NaN.
template <typename C>
inline void ArgMaxStep(C v, int64_t i, C& best, int64_t& where) {
  const bool take = (v > best) | (IsNan(v) & !IsNan(best));
  best = take ? v : best;
  where = take ? i : where;
}

// (max, first index of it) of p[0, n), n > 0: 8 interleaved lanes, whose winners are merged preferring
// NaN, then the larger value, then the smaller index.
template <typename T>
std::pair<ComputeT<T>, int64_t> ArgMaxRun(const T* p, int64_t n) {
  using C = ComputeT<T>;
  constexpr int64_t kLanes = 8;
  C best[kLanes];
  int64_t where[kLanes];
  const int64_t lanes = std::min(kLanes, n);
  for (int64_t j = 0; j < lanes; ++j) best[j] = ToCompute(p[j]), where[j] = j;
  int64_t i = lanes;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) ArgMaxStep(ToCompute(p[i + j]), i + j, best[j], where[j]);
  }
  for (; i < n; ++i) ArgMaxStep(ToCompute(p[i]), i, best[i % kLanes], where[i % kLanes]);
  C bv = best[0];
  int64_t bi = where[0];
  for (int64_t j = 1; j < lanes; ++j) {
    const bool better = IsNan(best[j]) || IsNan(bv)
                            ? IsNan(best[j]) && (!IsNan(bv) || where[j] < bi)
                            : best[j] > bv || (best[j] == bv && where[j] < bi);
    if (better) bv = best[j], bi = where[j];
  }
  return {bv, bi};
}

// vals/idx[A * K] = max over R of [A, R, K] data (first index on ties; a NaN wins, the first NaN first).
template <typename T>
void ArgMaxARK(const T* p, const Layout& l, T* vals, int64_t* idx) {
  using C = ComputeT<T>;
  const int64_t col_blocks = (l.k + kCols - 1) / kCols;
  const int64_t task_elems = std::max<int64_t>(1, l.r * std::min(l.k, kCols));
  ParallelFor(0, l.a * col_blocks, std::max<int64_t>(1, kGrain / task_elems), [&](int64_t s, int64_t e) {
    C best[kCols];
    int64_t where[kCols];
    for (int64_t t = s; t < e; ++t) {
      const int64_t a = t / col_blocks, k0 = (t % col_blocks) * kCols, m = std::min(kCols, l.k - k0);
      const T* base = p + a * l.r * l.k + k0;
      if (l.k == 1) {
        std::tie(best[0], where[0]) = ArgMaxRun(base, l.r);
      } else {
        for (int64_t k = 0; k < m; ++k) best[k] = ToCompute(base[k]), where[k] = 0;
        for (int64_t i = 1; i < l.r; ++i) {
          const T* row = base + i * l.k;
          for (int64_t k = 0; k < m; ++k) ArgMaxStep(ToCompute(row[k]), i, best[k], where[k]);
        }
      }
      for (int64_t k = 0; k < m; ++k) vals[a * l.k + k0 + k] = FromCompute<T>(best[k]), idx[a * l.k + k0 + k] = where[k];
    }
  });
}

TensorList MaxKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const std::vector<int64_t> dims{attrs.GetInt("dim")};
  const Plan plan = MakePlan(x.sizes(), dims, attrs.GetBool("keepdim"), "max");
  CheckNonEmpty(x, plan, dims, "max");
  const Layout l = Arrange(x, plan.reduced);
  Tensor vals = Empty(plan.out_shape, x.dtype(), x.device());
  Tensor idx = Empty(plan.out_shape, DType::kInt64, x.device());
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "max", [&] {
    using T = scalar_t;
    ArgMaxARK(static_cast<const T*>(l.data.raw_data()), l, static_cast<T*>(vals.raw_data()),
              static_cast<int64_t*>(idx.raw_data()));
  });
  return {vals, idx};
}

// Strides that read a reduced-shape tensor `g` (keepdim or not) at every index of the input shape.
Shape ExpandedStrides(const Tensor& g, const Plan& plan, bool keepdim) {
  Shape s(plan.reduced.size(), 0);
  int64_t j = 0;
  for (size_t d = 0; d < plan.reduced.size(); ++d) {
    if (!plan.reduced[d]) s[d] = g.stride(j);
    if (!plan.reduced[d] || keepdim) ++j;
  }
  return s;
}

// out[shape] = scale * grad broadcast over the reduced dims.
TensorList SumBackwardKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& g = in[0];
  const Shape& shape = a.GetInts("shape");
  const bool keepdim = a.GetBool("keepdim");
  const Plan plan = MakePlan(shape, a.GetInts("dims"), keepdim, "sum_backward");
  TESSEL_CHECK(g.sizes() == plan.out_shape, "sum_backward: grad shape ", ShapeStr(g.sizes()), " does not match ",
               ShapeStr(plan.out_shape), ", the reduction of ", ShapeStr(shape));
  const Shape gs = ExpandedStrides(g, plan, keepdim);
  Tensor out = Empty(shape, g.dtype(), g.device());
  const Shape os = out.strides();
  const double scale = a.GetDouble("scale", 1.0);
  TESSEL_DISPATCH_FLOATING_TYPES(g.dtype(), "sum_backward", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    const T* pg = static_cast<const T*>(g.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const C sc = static_cast<C>(scale);
    ParallelFor(0, out.numel(), kGrain, [&](int64_t s, int64_t e) {
      ForEachStrided<2>(shape, {std::span<const int64_t>(os), std::span<const int64_t>(gs)},
                        [&](const int64_t* off) { po[off[0]] = FromCompute<T>(ToCompute(pg[off[1]]) * sc); }, s, e);
    });
  });
  return {out};
}

// out[shape] = zeros with grad[o] written at index idx[o] along `dim` (the adjoint of Max's values).
TensorList MaxBackwardKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& g = in[0];
  const Tensor& idx = in[1];
  const Shape& shape = a.GetInts("shape");
  const bool keepdim = a.GetBool("keepdim");
  const Plan plan = MakePlan(shape, {a.GetInt("dim")}, keepdim, "max_backward");
  TESSEL_CHECK(g.sizes() == plan.out_shape && idx.sizes() == plan.out_shape && idx.dtype() == DType::kInt64,
               "max_backward: expected grad and int64 indices of shape ", ShapeStr(plan.out_shape), ", got ",
               DescribeInputs(in));
  const int64_t dim = NormalizeDim(a.GetInt("dim"), static_cast<int64_t>(shape.size()), "max_backward");
  Tensor out = Zeros(shape, g.dtype(), g.device());
  if (out.numel() == 0) return {out};
  Shape kept = shape;
  if (!kept.empty()) kept[dim] = 1;
  const Shape os = out.strides(), gs = ExpandedStrides(g, plan, keepdim), is = ExpandedStrides(idx, plan, keepdim);
  const int64_t dim_stride = shape.empty() ? 0 : os[dim];
  const int64_t* pi = static_cast<const int64_t*>(idx.raw_data());
  TESSEL_DISPATCH_FLOATING_TYPES(g.dtype(), "max_backward", [&] {
    using T = scalar_t;
    const T* pg = static_cast<const T*>(g.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    ParallelFor(0, NumElements(kept), kGrain, [&](int64_t s, int64_t e) {
      ForEachStrided<3>(kept, {std::span<const int64_t>(os), std::span<const int64_t>(gs), std::span<const int64_t>(is)},
                        [&](const int64_t* off) { po[off[0] + pi[off[2]] * dim_stride] = pg[off[1]]; }, s, e);
    });
  });
  return {out};
}

Tensor SumAs(const Tensor& g, const Attrs& a);
// sum_backward is linear in its input: its own gradient sums the incoming one back (create_graph).
const OpDef& kSumBackward = RegisterOp({.name = "sum_backward",
                                        .cpu = SumBackwardKernel,
                                        .backward = [](const BackwardContext& c) -> TensorList {
                                          return {SumAs(c.grad_outputs[0], c.attrs)};
                                        },
                                        .save_inputs = false});
// max_backward scatters g to the argmax positions: linear in g, so its own gradient gathers gg back from
// them (create_graph), a sum of gg times the op's 0/1 mask along dim.
const OpDef& kMaxBackward = RegisterOp({.name = "max_backward",
                                        .cpu = MaxBackwardKernel,
                                        .backward = [](const BackwardContext& c) -> TensorList {
                                          if (!c.needs_input_grad[0]) return {Tensor(), Tensor()};
                                          const Tensor mask = autograd::CallOp1(
                                              kMaxBackward, {OnesLike(c.inputs[0]), c.inputs[1]}, c.attrs);
                                          return {Sum(Mul(c.grad_outputs[0], mask), {c.attrs.GetInt("dim")},
                                                      c.attrs.GetBool("keepdim")),
                                                  Tensor()};
                                        }});

// ---- backward formulas (public ops only, so they also run on distributed tensors) ---------------

// The reduction sum_backward's attrs describe, times its scale: the adjoint of the broadcast.
Tensor SumAs(const Tensor& g, const Attrs& a) {
  const Tensor s = Sum(g, a.GetInts("dims"), a.GetBool("keepdim"));
  const double scale = a.GetDouble("scale", 1.0);
  return scale == 1.0 ? s : MulScalar(s, scale);
}

// `t` (a reduction's output shape) broadcast back to `shape`, times `scale`.
Tensor ExpandReduced(const Tensor& t, const Attrs& fwd, const Shape& shape, double scale = 1.0) {
  return autograd::CallOp1(kSumBackward, {t},
                           Attrs()
                               .Set("shape", shape)
                               .Set("dims", fwd.GetInts("dims"))
                               .Set("keepdim", fwd.GetBool("keepdim"))
                               .Set("scale", scale));
}

TensorList SumBackward(const BackwardContext& c) {
  return {ExpandReduced(c.grad_outputs[0], c.attrs, c.attrs.GetInts("shape"))};
}

TensorList MeanBackward(const BackwardContext& c) {
  const Shape& shape = c.attrs.GetInts("shape");
  const Plan plan = MakePlan(shape, c.attrs.GetInts("dims"), false, "mean");
  return {ExpandReduced(c.grad_outputs[0], c.attrs, shape, 1.0 / static_cast<double>(plan.inner))};
}

// grad * mask / count(mask), mask = (v == out) broadcast: the gradient split evenly among ties (torch).
Tensor SplitAmongTies(const Tensor& g, const Tensor& v, const Tensor& out, const Attrs& fwd) {
  const Tensor mask = Cast(Eq(v, ExpandReduced(out, fwd, v.sizes())), v.dtype());
  const Tensor count = Sum(mask, fwd.GetInts("dims"), fwd.GetBool("keepdim"));
  return Mul(ExpandReduced(Div(g, count), fwd, v.sizes()), mask);
}

TensorList AmaxBackward(const BackwardContext& c) {
  return {SplitAmongTies(c.grad_outputs[0], c.inputs[0], c.outputs[0], c.attrs)};
}

Tensor SgnTimes(const Tensor& g, const Tensor& x) {  // g * sgn(x), fused (core/ops/unary.cc)
  return autograd::CallOp1(GetOp("abs_backward"), {g, x});
}

TensorList NormBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const double p = c.attrs.GetDouble("p");
  if (p == 1) return {SgnTimes(ExpandReduced(g, c.attrs, x.sizes()), x)};
  if (std::isinf(p)) return {SgnTimes(SplitAmongTies(g, Abs(x), out, c.attrs), x)};
  // d|x|_p = sgn(x) |x|^(p-1) / |x|_p^(p-1); zero where the norm is zero (torch).
  const Tensor zero_norm = Eq(out, ZerosLike(out));
  if (p == 2) return {Mul(x, ExpandReduced(MaskedFill(Div(g, out), zero_norm, 0.0), c.attrs, x.sizes()))};
  const Tensor scale = MaskedFill(Div(g, Pow(out, p - 1)), zero_norm, 0.0);
  return {Mul(SgnTimes(Pow(Abs(x), p - 1), x), ExpandReduced(scale, c.attrs, x.sizes()))};
}

TensorList MaxBackward(const BackwardContext& c) {
  return {autograd::CallOp1(kMaxBackward, {c.grad_outputs[0], c.outputs[1]}, c.attrs)};
}

// Sum/Mean/Max record the input shape as "shape" so their backward needs no saved input.
const OpDef& kSum = RegisterOp({.name = "sum", .cpu = SumKernel, .backward = SumBackward, .save_inputs = false});
const OpDef& kMean = RegisterOp({.name = "mean", .cpu = MeanKernel, .backward = MeanBackward, .save_inputs = false});
const OpDef& kAmax = RegisterOp({.name = "amax", .cpu = AmaxKernel, .backward = AmaxBackward, .save_outputs = true});
const OpDef& kMax = RegisterOp({.name = "max",
                                .cpu = MaxKernel,
                                .backward = MaxBackward,
                                .save_inputs = false,
                                .save_outputs = true,
                                .non_differentiable_outputs = {1}});
const OpDef& kNorm = RegisterOp({.name = "norm", .cpu = NormKernel, .backward = NormBackward, .save_outputs = true});

Attrs ReduceAttrs(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return Attrs().Set("dims", dims).Set("keepdim", keepdim).Set("shape", x.sizes());
}

}  // namespace

Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return autograd::CallOp1(kSum, {x}, ReduceAttrs(x, dims, keepdim));
}
Tensor Mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return autograd::CallOp1(kMean, {x}, ReduceAttrs(x, dims, keepdim));
}
Tensor Amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return autograd::CallOp1(kAmax, {x}, ReduceAttrs(x, dims, keepdim));
}
std::pair<Tensor, Tensor> Max(const Tensor& x, int64_t dim, bool keepdim) {
  TensorList out =
      autograd::CallOp(kMax, {x}, Attrs().Set("dim", dim).Set("keepdim", keepdim).Set("shape", x.sizes()));
  return {out[0], out[1]};
}
Tensor Norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  return autograd::CallOp1(kNorm, {x}, ReduceAttrs(x, dims, keepdim).Set("p", p));
}

namespace {
template <typename T>
inline bool Nonzero(T v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
    return (v.bits & 0x7fff) != 0;  // +0 and -0 are the only zeros; NaN is nonzero, as v != 0 says for floats
  } else {
    return v != T(0);
  }
}
}  // namespace

Tensor AnyAllLocal(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool all) {
  const char* name = all ? "all" : "any";
  if (!x.defined() || x.is_distributed() || !x.device().is_cpu() || dims.size() > 1) return Tensor();
  const Plan plan = MakePlan(x.sizes(), dims, keepdim, name);
  const Tensor c = x.is_contiguous() ? x : Contiguous(x);
  // Elements reduced per output: `outer` blocks of `n` (the reduced dim, or everything) times `inner` apart.
  const int64_t nd = x.dim();
  int64_t outer = 1, n = x.numel(), inner = 1;
  if (!dims.empty() && nd > 0) {
    const int64_t d = NormalizeDim(dims[0], nd, name);
    outer = 1, n = x.size(d), inner = 1;
    for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
    for (int64_t k = d + 1; k < nd; ++k) inner *= x.size(k);
  }
  Tensor out = Empty(plan.out_shape, x.dtype() == DType::kUInt8 ? DType::kUInt8 : DType::kBool);
  auto* po = static_cast<uint8_t*>(out.raw_data());  // bool and uint8 both store 0 / 1 in a byte
  TESSEL_DISPATCH_ALL_TYPES(c.dtype(), name, [&] {
    const scalar_t* p = static_cast<const scalar_t*>(c.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const scalar_t* q = p + o * n * inner + i;
        bool r = all;
        for (int64_t k = 0; k < n; ++k) {
          if (Nonzero(q[k * inner]) != all) {  // any: the first nonzero decides; all: the first zero
            r = !all;
            break;
          }
        }
        po[o * inner + i] = r;
      }
    }
  });
  return out;
}

}  // namespace tessel
