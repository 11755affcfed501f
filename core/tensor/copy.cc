// core/tensor/copy.cc — strided copy with dtype conversion (49 dtype pairs).
#include "core/tensor/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/tensor/device_copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/strided_loop.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

// Strides of `src` broadcast to `shape` (size-1 or missing leading dims get stride 0).
Shape BroadcastStrides(const Tensor& src, const Shape& shape) {
  Shape out(shape.size(), 0);
  const int64_t lead = static_cast<int64_t>(shape.size()) - src.dim();
  for (int64_t i = 0; i < src.dim(); ++i) {
    out[lead + i] = src.size(i) == 1 ? 0 : src.stride(i);
  }
  return out;
}

// Same dtype, unit inner stride on both sides (e.g. materializing a transpose of the outer dims):
// one memcpy per row of the innermost dim, rows split across threads. Returns false if not applicable.
bool CopyRowsSameDtype(const Tensor& dst, const Tensor& src, const Shape& src_strides) {
  const int64_t nd = dst.dim();
  if (nd == 0 || dst.stride(nd - 1) != 1 || src_strides[nd - 1] != 1) return false;
  const int64_t inner = dst.size(nd - 1);
  if (inner < 8) return false;
  const int64_t rows = dst.numel() / inner;
  const int64_t esize = ElementSize(dst.dtype());
  char* d = static_cast<char*>(dst.raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  const Shape& sizes = dst.sizes();
  const Shape& dstr = dst.strides();
  ParallelFor(0, rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t rem = r, od = 0, os = 0;
      for (int64_t k = nd - 2; k >= 0; --k) {
        const int64_t i = rem % sizes[k];
        rem /= sizes[k];
        od += i * dstr[k];
        os += i * src_strides[k];
      }
      std::memcpy(d + od * esize, s + os * esize, inner * esize);
    }
  });
  return true;
}

// Same dtype into a contiguous dst from a src whose unit-stride dim j is not the last (a materialized
// transpose: x.t().contiguous(), transpose(-1, -2), movedim): element by element, one side of every pair
// of accesses strides by a whole row, so copy 32 x 32 tiles of the (j, last) plane instead, each read and
// written within the L1 (4x faster on [1024, 1024] float32). Returns false if not applicable.
template <typename E>
void CopyTransposedTiles(E* d, const E* s, const Shape& sizes, const Shape& dstr, const Shape& sstr, int64_t j) {
  constexpr int64_t kTile = 32;
  const int64_t nd = static_cast<int64_t>(sizes.size()), last = nd - 1;
  const int64_t nj = sizes[j], nl = sizes[last], tj = (nj + kTile - 1) / kTile, tl = (nl + kTile - 1) / kTile;
  int64_t outer = 1;
  for (int64_t k = 0; k < last; ++k) outer *= k == j ? 1 : sizes[k];
  const int64_t dj = dstr[j], sl = sstr[last];
  ParallelFor(0, outer * tj * tl, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t rem = t / (tj * tl), od = 0, os = 0;
      for (int64_t k = last - 1; k >= 0; --k) {
        if (k == j) continue;
        const int64_t i = rem % sizes[k];
        rem /= sizes[k];
        od += i * dstr[k];
        os += i * sstr[k];
      }
      const int64_t a0 = (t / tl % tj) * kTile, b0 = (t % tl) * kTile;
      const int64_t a1 = std::min(nj, a0 + kTile), b1 = std::min(nl, b0 + kTile);
      for (int64_t a = a0; a < a1; ++a) {
        E* drow = d + od + a * dj;
        const E* scol = s + os + a;
        for (int64_t b = b0; b < b1; ++b) drow[b] = scol[b * sl];
      }
    }
  });
}

bool CopyTransposed(const Tensor& dst, const Tensor& src, const Shape& src_strides) {
  const int64_t nd = dst.dim();
  if (nd < 2 || !dst.is_contiguous() || src_strides[nd - 1] == 1 || dst.size(nd - 1) < 8) return false;
  int64_t j = -1;
  for (int64_t k = 0; k < nd - 1; ++k) {
    if (src_strides[k] == 1 && dst.size(k) >= 8) j = k;
  }
  if (j < 0) return false;
  void* d = dst.raw_data();
  const void* s = src.raw_data();
  switch (ElementSize(dst.dtype())) {
    case 1: CopyTransposedTiles(static_cast<uint8_t*>(d), static_cast<const uint8_t*>(s), dst.sizes(), dst.strides(),
                                src_strides, j); return true;
    case 2: CopyTransposedTiles(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(s), dst.sizes(), dst.strides(),
                                src_strides, j); return true;
    case 4: CopyTransposedTiles(static_cast<uint32_t*>(d), static_cast<const uint32_t*>(s), dst.sizes(), dst.strides(),
                                src_strides, j); return true;
    case 8: CopyTransposedTiles(static_cast<uint64_t*>(d), static_cast<const uint64_t*>(s), dst.sizes(), dst.strides(),
                                src_strides, j); return true;
    default: return false;
  }
}

}  // namespace

void CopyInto(const Tensor& dst, const Tensor& src) {
  TESSEL_CHECK(!dst.is_distributed() && !src.is_distributed(), "copy_: CopyInto works on local tensors");
  if (src.sizes() != dst.sizes()) {
    const Shape b = BroadcastShapes(dst.sizes(), src.sizes(), "copy_");
    TESSEL_CHECK(b == dst.sizes(), "copy_: source shape ", ShapeStr(src.sizes()),
                 " cannot be broadcast to destination shape ", ShapeStr(dst.sizes()));
  }
  dst.impl()->storage().BumpVersion();
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (!dst.device().is_cpu() || !src.device().is_cpu()) {
    CopyAcrossDevices(dst, src);
    return;
  }
  if (src.dtype() == dst.dtype() && src.sizes() == dst.sizes() && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), n * ElementSize(dst.dtype()));
    return;
  }
  if (src.numel() == 1 && dst.is_contiguous()) {
    // A scalar broadcast (fill_, full, ones): converted once, then a typed fill split across threads (the
    // strided loop below converted it per element: 1M float32 took 2.8x torch's time).
    TESSEL_DISPATCH_ALL_TYPES(dst.dtype(), "copy_", [&] {
      using D = scalar_t;
      D v{};
      TESSEL_DISPATCH_ALL_TYPES(src.dtype(), "copy_", [&] {
        v = ConvertValue<D>(*static_cast<const scalar_t*>(src.raw_data()));
      });
      D* d = static_cast<D*>(dst.raw_data());
      ParallelFor(0, n, 1 << 16, [&](int64_t b, int64_t e) { std::fill(d + b, d + e, v); });
    });
    return;
  }
  const Shape src_strides = BroadcastStrides(src, dst.sizes());
  const Shape& dst_strides = dst.strides();
  const Shape& sizes = dst.sizes();
  if (src.dtype() == dst.dtype() && CopyRowsSameDtype(dst, src, src_strides)) return;
  if (src.dtype() == dst.dtype() && CopyTransposed(dst, src, src_strides)) return;
  TESSEL_DISPATCH_ALL_TYPES(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    D* d = static_cast<D*>(dst.raw_data());
    TESSEL_DISPATCH_ALL_TYPES(src.dtype(), "copy_", [&] {
      using S = scalar_t;
      const S* s = static_cast<const S*>(src.raw_data());
      ParallelFor(0, n, 1 << 15, [&](int64_t b, int64_t e) {
        ForEachStrided<2>(sizes, {std::span<const int64_t>(dst_strides), std::span<const int64_t>(src_strides)},
                          [&](const int64_t* off) { d[off[0]] = ConvertValue<D>(s[off[1]]); }, b, e);
      });
    });
  });
}

Tensor DenseOrCopy(const Tensor& t) { return DenseAs(t, t.defined() ? t.dtype() : DType::kFloat32); }

Tensor DenseAs(const Tensor& t, DType dtype) {
  if (!t.defined() || (t.is_contiguous() && t.dtype() == dtype)) return t;
  Tensor c = Empty(t.sizes(), dtype, t.device());
  CopyInto(c, t);
  return c;
}

}  // namespace tessel
