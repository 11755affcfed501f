// core/tensor/copy.cc — strided copy with dtype conversion (49 dtype pairs).
#include "core/tensor/copy.h"

#include <algorithm>
#include <cstring>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/tensor/device_copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/strided_loop.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

template <typename D, typename S>
D Convert(S v) {
  const auto c = ToCompute(v);
  if constexpr (std::is_same_v<D, bool>) {
    return c != 0;
  } else {
    return FromCompute<D>(c);
  }
}

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
  const Shape src_strides = BroadcastStrides(src, dst.sizes());
  const Shape& dst_strides = dst.strides();
  const Shape& sizes = dst.sizes();
  if (src.dtype() == dst.dtype() && CopyRowsSameDtype(dst, src, src_strides)) return;
  TESSEL_DISPATCH_ALL_TYPES(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    D* d = static_cast<D*>(dst.raw_data());
    TESSEL_DISPATCH_ALL_TYPES(src.dtype(), "copy_", [&] {
      using S = scalar_t;
      const S* s = static_cast<const S*>(src.raw_data());
      ParallelFor(0, n, 1 << 15, [&](int64_t b, int64_t e) {
        ForEachStrided<2>(sizes, {std::span<const int64_t>(dst_strides), std::span<const int64_t>(src_strides)},
                          [&](const int64_t* off) { d[off[0]] = Convert<D>(s[off[1]]); }, b, e);
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
