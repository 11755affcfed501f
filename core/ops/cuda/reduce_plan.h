// core/ops/cuda/reduce_plan.h — the index math of tessel's CUDA sum / mean / amax / norm kernels
// (core/ops/reduction.cu):
// which input elements fold into each output element, for any strides, shared with a host test that runs
// the kernel's order against the CPU ops "sum", "mean" and "sum_backward" (core/ops/reduction.cc).
//
// Invariant: output element o (row-major over the kept dims — the output's order with or without keepdim)
// reads input offsets outer(o) + inner(r) for r < inner_n, where outer walks the kept dims and inner the
// reduced dims with the input's own strides (so strided inputs need no copy). The kernel gives each
// output a block; thread t folds r = t, t + T, ... (ReducePartial) and the block tree-merges
// (cuda/row_reduce.h); the result is sum * scale in fp32 (scale 1 for sum, 1 / inner_n for mean, the CPU
// kernel's Finish), rounded once.
//
// Example:
//   const ReducePlan p = ReducePlan::Make(x.sizes(), x.strides(), reduced);
//   // block o: BlockMerge(slots, ReducePartial(px, p, o, threadIdx.x, blockDim.x)).sum * scale
#pragma once

#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "core/ops/cuda/offset_calculator.h"
#include "core/ops/cuda/row_reduce.h"

namespace tessel::cuda {

struct ReducePlan {
  OffsetCalculator<1> outer, inner;
  int64_t num_out, inner_n;

  // reduced[d] != 0 for every reduced dim. ok() is false when either side has more than kMaxDims
  // non-mergeable dims.
  static ReducePlan Make(std::span<const int64_t> sizes, std::span<const int64_t> strides,
                         std::span<const char> reduced) {
    std::vector<int64_t> kept_sizes, kept_strides, red_sizes, red_strides;
    ReducePlan p{{}, {}, 1, 1};
    for (size_t d = 0; d < sizes.size(); ++d) {
      (reduced[d] ? red_sizes : kept_sizes).push_back(sizes[d]);
      (reduced[d] ? red_strides : kept_strides).push_back(strides[d]);
      (reduced[d] ? p.inner_n : p.num_out) *= sizes[d];
    }
    p.outer = OffsetCalculator<1>::Make(kept_sizes, {std::span<const int64_t>(kept_strides)});
    p.inner = OffsetCalculator<1>::Make(red_sizes, {std::span<const int64_t>(red_strides)});
    return p;
  }
  bool ok() const { return outer.ndim >= 0 && inner.ndim >= 0; }
};

// A sum over the rows of a contiguous [rows, cols] layout (bias gradients, sums over leading dims): the
// plan's kept side is one unit-stride run of cols outputs and its reduced side one run of stride cols.
// The one-block-per-output kernel reads such a column with stride cols (uncoalesced: 87 us for a GPT-2
// bias gradient on the H200); the column sum reads 32 adjacent columns per warp instead, in two passes.
inline constexpr int64_t kColumnSumMinRows = 64;
inline bool IsColumnSum(const ReducePlan& p) {
  return p.outer.ndim == 1 && p.outer.strides[0][0] == 1 && p.inner.ndim == 1 &&
         p.inner.strides[0][0] == p.num_out && p.inner_n >= kColumnSumMinRows;
}
// Row chunks of the first pass (each block sums 32 columns over one chunk into fp32 partials; the second
// pass adds a column's partials in chunk order, so the result does not depend on scheduling): enough
// blocks to fill a large GPU (~528, 4 per SM of an H100 / H200), chunks of at least 32 rows.
inline int64_t ColumnSumChunks(int64_t rows, int64_t cols) {
  const int64_t groups = (cols + 31) / 32;
  const int64_t want = (528 + groups - 1) / groups;
  const int64_t most = (rows + 31) / 32;
  return want < most ? want : most;
}

// sum_to_size's reduced dims: x's leading dims beyond `shape`'s rank, and dims where `shape` has 1 and x
// does not. REQUIRES: shape broadcasts to x_sizes. The plan's outputs are then `shape` in row-major order.
inline std::vector<char> SumToSizeReduced(std::span<const int64_t> x_sizes, std::span<const int64_t> shape) {
  const size_t lead = x_sizes.size() - shape.size();
  std::vector<char> r(x_sizes.size(), 1);
  for (size_t d = lead; d < x_sizes.size(); ++d) r[d] = shape[d - lead] == 1 && x_sizes[d] != 1;
  return r;
}

// sum_backward's read side: strides that read the reduced-shape gradient (strides g_strides, keepdim or
// not) at every index of the input shape (0 along reduced dims: the broadcast).
inline std::vector<int64_t> ReducedGradStrides(std::span<const int64_t> g_strides, std::span<const char> reduced,
                                               bool keepdim) {
  std::vector<int64_t> s(reduced.size(), 0);
  size_t j = 0;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) s[d] = g_strides[j];
    if (!reduced[d] || keepdim) ++j;
  }
  return s;
}

// The reductions (sum, amax and norm with p = 1, 2, inf; mean is a scaled sum): which accumulator, what
// each element contributes, and the finish. REQUIRES for Finish: the accumulator type IsMax(kind) names.
enum class ReduceKind : uint8_t { kSum, kAmax, kNorm1, kNorm2, kNormInf };

TESSEL_HOST_DEVICE inline bool IsMax(ReduceKind k) { return k == ReduceKind::kAmax || k == ReduceKind::kNormInf; }

TESSEL_HOST_DEVICE inline float MapElement(ReduceKind k, float v) {
  if (k == ReduceKind::kNorm2) return v * v;
  if (k == ReduceKind::kNorm1 || k == ReduceKind::kNormInf) return fabsf(v);
  return v;
}

TESSEL_HOST_DEVICE inline float Finish(ReduceKind k, const SumAcc& a) {
  return k == ReduceKind::kNorm2 ? sqrtf(a.sum) : a.sum;
}
// The inf-norm of nothing is 0 (the CPU's identity for it), amax of nothing never runs (an error).
TESSEL_HOST_DEVICE inline float Finish(ReduceKind k, const MaxAcc& a) {
  return k == ReduceKind::kNormInf && a.max == -INFINITY ? 0.0f : a.max;
}

// Thread t's fold of output o's elements r = t, t + threads, ...: fold(acc, value, r) for each.
template <typename Acc, typename T, typename Fold>
TESSEL_HOST_DEVICE inline Acc FoldReduced(const T* x, const ReducePlan& p, int64_t o, int t, int threads, Fold fold) {
  int64_t base = 0;
  p.outer.Get(o, &base);
  Acc acc = Acc::Identity();
  for (int64_t r = t; r < p.inner_n; r += threads) {
    int64_t off = 0;
    p.inner.Get(r, &off);
    fold(acc, LoadF(x, base + off), r);
  }
  return acc;
}

// Folds MapElement(kind, value) into a SumAcc or MaxAcc.
struct MappedFold {
  ReduceKind kind;
  template <typename Acc>
  TESSEL_HOST_DEVICE void operator()(Acc& acc, float v, int64_t) const {
    acc.Push(MapElement(kind, v));
  }
};

template <typename Acc, typename T>
TESSEL_HOST_DEVICE inline Acc ReduceMappedPartial(const T* x, const ReducePlan& p, int64_t o, int t, int threads,
                                                  ReduceKind kind) {
  return FoldReduced<Acc>(x, p, o, t, threads, MappedFold{kind});
}

// max along one dim: the maximum and the index of its first occurrence (a NaN beats every number, the
// first NaN wins), the CPU kernel's choice; any merge order gives it, so results are bitwise the CPU's.
struct ArgMaxAcc {
  float value;
  int64_t index;
  TESSEL_HOST_DEVICE static ArgMaxAcc Identity() { return {-INFINITY, INT64_MAX}; }
  TESSEL_HOST_DEVICE void Push(float v, int64_t i) {
    const bool v_nan = v != v, mine_nan = value != value;
    const bool better = v_nan || mine_nan ? v_nan && (!mine_nan || i < index) : v > value || (v == value && i < index);
    if (better) value = v, index = i;
  }
  TESSEL_HOST_DEVICE void Merge(const ArgMaxAcc& o) { Push(o.value, o.index); }
};

// Folds (value, position along the reduced dim) into an ArgMaxAcc.
struct ArgMaxFold {
  TESSEL_HOST_DEVICE void operator()(ArgMaxAcc& acc, float v, int64_t r) const { acc.Push(v, r); }
};

// Thread t's fold for output o of a plan reducing exactly one dim (the reduced index r is the position
// along that dim).
template <typename T>
TESSEL_HOST_DEVICE inline ArgMaxAcc ArgMaxPartial(const T* x, const ReducePlan& p, int64_t o, int t, int threads) {
  return FoldReduced<ArgMaxAcc>(x, p, o, t, threads, ArgMaxFold{});
}

// sum / mean: the plain sum of thread t's elements.
template <typename T>
TESSEL_HOST_DEVICE inline SumAcc ReducePartial(const T* x, const ReducePlan& p, int64_t o, int t, int threads) {
  return ReduceMappedPartial<SumAcc>(x, p, o, t, threads, ReduceKind::kSum);
}

}  // namespace tessel::cuda
