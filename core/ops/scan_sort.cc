// core/ops/scan_sort.cc — CumSum (one pass along the dim per (outer, inner) lane, parallel over lanes) and
// the per-row sorting permutation (an integer sort of order-preserving keys, parallel over rows).
#include "core/ops/scan_sort.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <type_traits>
#include <vector>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/op.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/ops/view.h"
#include "core/tensor/shape.h"

namespace tessel {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements of work per thread slice, at least
constexpr int64_t kLaneBlock = 64;   // inner elements one task adds at a time
constexpr int64_t kSmallTopK = 64;   // a topk up to this k keeps its k best in one pass

// The accumulator of torch's CPU cumsum (at::acc_type<T, false>): double for float and double, float for
// the 16-bit floats, 64 bits for the integers (unsigned, so that an overflow wraps as torch's does instead of
// being undefined; the same bits as int64).
template <typename T>
using CumAcc = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double,
                                  std::conditional_t<std::is_integral_v<T>, uint64_t, float>>;

// One row's running sums (reverse: from its end).
template <typename T, typename A>
void CumRow(const T* x, T* out, int64_t n, bool reverse) {
  A acc{0};
  if (reverse) {
    for (int64_t l = n - 1; l >= 0; --l) out[l] = FromCompute<T>(acc += static_cast<A>(ToCompute(x[l])));
  } else {
    for (int64_t l = 0; l < n; ++l) out[l] = FromCompute<T>(acc += static_cast<A>(ToCompute(x[l])));
  }
}

// Four adjacent rows at once: four independent chains of adds instead of one latency-bound chain.
template <typename T, typename A>
void CumRows4(const T* x, T* out, int64_t n, bool reverse) {
  A a0{0}, a1{0}, a2{0}, a3{0};
  for (int64_t s = 0; s < n; ++s) {
    const int64_t l = reverse ? n - 1 - s : s;
    out[l] = FromCompute<T>(a0 += static_cast<A>(ToCompute(x[l])));
    out[n + l] = FromCompute<T>(a1 += static_cast<A>(ToCompute(x[n + l])));
    out[2 * n + l] = FromCompute<T>(a2 += static_cast<A>(ToCompute(x[2 * n + l])));
    out[3 * n + l] = FromCompute<T>(a3 += static_cast<A>(ToCompute(x[3 * n + l])));
  }
}

// in: x; attrs dim (wrapped), reverse -> x's shape and dtype
TensorList CumSumKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor x = DenseOrCopy(in[0]);
  const int64_t dim = attrs.GetInt("dim");
  const bool reverse = attrs.GetInt("reverse") != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.size(dim);
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  if (x.numel() == 0) return {out};
  const int64_t blocks = (inner + kLaneBlock - 1) / kLaneBlock;
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "cumsum", [&] {
    using T = scalar_t;
    if constexpr (std::is_same_v<T, bool>) {
      TESSEL_FAIL(ErrorCode::kInvalidArgument, "cumsum: bool input (convert it to int64 first, as torch's result)");
    } else {
      using A = CumAcc<T>;
      const T* px = static_cast<const T*>(x.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      if (inner == 1) {  // running sums along contiguous rows, 4 rows at a time (4 independent add chains)
        ParallelFor(0, (outer + 3) / 4, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, 4 * n)),
                    [&](int64_t g0, int64_t g1) {
          for (int64_t g = g0; g < g1; ++g) {
            const int64_t r0 = 4 * g, m = std::min<int64_t>(4, outer - r0);
            if (m == 4) {
              CumRows4<T, A>(px + r0 * n, po + r0 * n, n, reverse);
            } else {
              for (int64_t r = r0; r < r0 + m; ++r) CumRow<T, A>(px + r * n, po + r * n, n, reverse);
            }
          }
        });
        return;
      }
      const int64_t per_task = n * std::min(inner, kLaneBlock);
      ParallelFor(0, outer * blocks, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_task)),
                  [&](int64_t t0, int64_t t1) {
        A acc[kLaneBlock];
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t o = t / blocks, i0 = (t % blocks) * kLaneBlock, w = std::min(kLaneBlock, inner - i0);
          std::fill(acc, acc + w, A{0});
          for (int64_t s = 0; s < n; ++s) {
            const int64_t l = reverse ? n - 1 - s : s;
            const int64_t at = (o * n + l) * inner + i0;
            for (int64_t i = 0; i < w; ++i) {
              acc[i] += static_cast<A>(ToCompute(px[at + i]));
              po[at + i] = FromCompute<T>(acc[i]);
            }
          }
        }
      });
    }
  });
  return {out};
}

const OpDef& CumSumOp();

TensorList CumSumBackward(const BackwardContext& c) {
  return {CumSum(c.grad_outputs[0], c.attrs.GetInt("dim"), c.attrs.GetInt("reverse") == 0)};
}

const OpDef& CumSumOp() {
  static const OpDef& op =
      RegisterOp({.name = "cumsum", .cpu = CumSumKernel, .backward = CumSumBackward, .save_inputs = false});
  return op;
}
const bool kRegistered = (CumSumOp(), true);

// An unsigned key whose order is the value's ascending order (descending: its reverse), so that rows sort as
// plain integers: floats by their bits with the sign folded (-0 as +0, equal as torch compares them; every NaN
// one key above +inf), signed integers with the sign bit flipped.
template <typename T>
auto SortKey(T v, bool descending) {
  using C = ComputeT<T>;
  const C c = ToCompute(v);
  if constexpr (std::is_floating_point_v<C>) {
    using K = std::conditional_t<sizeof(C) == 4, uint32_t, uint64_t>;
    constexpr K kSign = K{1} << (8 * sizeof(K) - 1);
    const C z = c + C{0};  // -0 + 0 is +0; everything else, NaN included, unchanged
    K bits;
    std::memcpy(&bits, &z, sizeof(K));
    // Branch-free (signs are data): negative values' bits inverted, positive ones' sign bit set.
    const K key = bits ^ (static_cast<K>(K{0} - (bits >> (8 * sizeof(K) - 1))) | kSign);
    const K ordered = c != c ? ~K{0} : key;
    return static_cast<K>(ordered ^ (descending ? ~K{0} : K{0}));
  } else if constexpr (std::is_same_v<C, bool>) {
    const uint32_t key = c ? 1u : 0u;
    return descending ? ~key : key;
  } else {
    using U = std::make_unsigned_t<std::conditional_t<sizeof(C) <= 4, int32_t, int64_t>>;
    U key = static_cast<U>(static_cast<std::conditional_t<sizeof(C) <= 4, int32_t, int64_t>>(c));
    if constexpr (std::is_signed_v<C>) key ^= U{1} << (8 * sizeof(U) - 1);
    return descending ? static_cast<U>(~key) : key;
  }
}

// Writes the first k positions of row `x` (length n) in sorted order to `out`: (key, position) pairs are
// distinct, so sorting them is the stable sort of the keys; a topk selects its k first (nth_element) and
// sorts only those. 32-bit keys and positions pack into one uint64 (a plain integer sort).
template <typename T>
void SortRow(const T* x, int64_t n, int64_t k, bool descending, int64_t* out) {
  using K = decltype(SortKey(T{}, false));
  auto finish = [&](auto& items, auto position) {
    if (k < n) {
      std::nth_element(items.begin(), items.begin() + k, items.end());
      std::sort(items.begin(), items.begin() + k);
    } else {
      std::sort(items.begin(), items.end());
    }
    for (int64_t j = 0; j < k; ++j) out[j] = position(items[static_cast<size_t>(j)]);
  };
  if constexpr (sizeof(K) == 4) {
    if (n <= int64_t{0xffffffff}) {
      std::vector<uint64_t> items(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        items[static_cast<size_t>(j)] = (uint64_t{SortKey(x[j], descending)} << 32) | static_cast<uint64_t>(j);
      }
      if (k < n && k <= kSmallTopK) {
        // A small topk in one pass over the items: the k best so far, sorted; an item enters only below the
        // k-th (for rows in random order, ~k·ln(n/k) times), so most cost one compare.
        if (k == 0) return;
        std::vector<uint64_t> best(items.begin(), items.begin() + k);
        std::sort(best.begin(), best.end());
        uint64_t kth = best.back();
        for (int64_t j = k; j < n; ++j) {
          const uint64_t item = items[static_cast<size_t>(j)];
          if (item < kth) {
            best.pop_back();
            best.insert(std::upper_bound(best.begin(), best.end(), item), item);
            kth = best.back();
          }
        }
        for (int64_t j = 0; j < k; ++j) out[j] = static_cast<int64_t>(best[static_cast<size_t>(j)] & 0xffffffffu);
        return;
      }
      finish(items, [](uint64_t item) { return static_cast<int64_t>(item & 0xffffffffu); });
      return;
    }
  }
  std::vector<std::pair<uint64_t, int64_t>> items(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) items[static_cast<size_t>(j)] = {uint64_t{SortKey(x[j], descending)}, j};
  finish(items, [](const std::pair<uint64_t, int64_t>& item) { return item.second; });
}

// torch's CPU topk of row `x` (aten's TopKImpl.h): (value, position) pairs compared by value only, NaN above
// every number, through libstdc++'s std::partial_sort when k·64 <= n, else std::nth_element and (sorted) a
// std::sort of the first k - 1; the k pairs in front are the result, in that order. Neither algorithm is stable,
// and which tied positions survive, and in what order, is theirs: running the same calls on the same sequence
// gives torch's indices among ties (a stable order kept the earlier positions: pruning masks and multinomial's
// zero-weight draws differed from torch's).
template <typename T>
void TorchTopKRow(const T* x, int64_t n, int64_t k, bool largest, bool sorted, int64_t* out) {
  if (k == 0) return;
  using V = std::conditional_t<std::is_floating_point_v<ComputeT<T>>, double, int64_t>;
  using Item = std::pair<V, int64_t>;
  std::vector<Item> q(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(j)] = {static_cast<V>(ToCompute(x[j])), j};
  const auto nan = [](V v) {
    if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
    return false;
  };
  const auto before = [&](const Item& a, const Item& b) {
    return largest ? (nan(a.first) && !nan(b.first)) || a.first > b.first
                   : (!nan(a.first) && nan(b.first)) || a.first < b.first;
  };
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), before);
  } else {
    std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), before);
    if (sorted) std::sort(q.begin(), q.begin() + (k - 1), before);
  }
  for (int64_t j = 0; j < k; ++j) out[j] = q[static_cast<size_t>(j)].second;
}

}  // namespace

Tensor CumSum(const Tensor& x, int64_t dim, bool reverse) {
  if (x.dim() == 0) return Reshape(CumSum(Reshape(x, {1}), 0, reverse), {});
  const int64_t d = NormalizeDim(dim, x.dim(), "cumsum");
  return autograd::CallOp1(CumSumOp(), {x}, Attrs().Set("dim", d).Set("reverse", int64_t{reverse}));
}

Tensor SortIndicesLastDim(const Tensor& x_in, bool descending, int64_t k) {
  TESSEL_CHECK(x_in.dim() == 2, "sort: expected rows [P, L], got ", ShapeStr(x_in.sizes()));
  const Tensor x = DenseOrCopy(x_in);
  const int64_t rows = x.size(0), length = x.size(1);
  if (k < 0) k = length;
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, k <= length, "topk: k ", k, " is out of range for rows of ", length);
  Tensor out = Empty({rows, k}, DType::kInt64, x.device());
  int64_t* po = out.data_ptr<int64_t>();
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "sort", [&] {
    using T = scalar_t;
    const T* px = static_cast<const T*>(x.raw_data());
    const int64_t work = std::max<int64_t>(1, length * 8);
    ParallelFor(0, rows, std::max<int64_t>(1, kGrain / work), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) SortRow(px + r * length, length, k, descending, po + r * k);
    });
  });
  return out;
}

Tensor TopKIndicesLastDim(const Tensor& x_in, int64_t k, bool largest, bool sorted) {
  TESSEL_CHECK(x_in.dim() == 2, "topk: expected rows [P, L], got ", ShapeStr(x_in.sizes()));
  const Tensor x = DenseOrCopy(x_in);
  const int64_t rows = x.size(0), length = x.size(1);
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, k >= 0 && k <= length, "topk: k ", k, " is out of range for rows of ",
                    length);
  Tensor out = Empty({rows, k}, DType::kInt64, x.device());
  int64_t* po = out.data_ptr<int64_t>();
  TESSEL_DISPATCH_ALL_TYPES(x.dtype(), "topk", [&] {
    using T = scalar_t;
    const T* px = static_cast<const T*>(x.raw_data());
    const int64_t work = std::max<int64_t>(1, length * 8);
    ParallelFor(0, rows, std::max<int64_t>(1, kGrain / work), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) TorchTopKRow(px + r * length, length, k, largest, sorted, po + r * k);
    });
  });
  return out;
}

}  // namespace tessel
