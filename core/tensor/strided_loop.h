// core/tensor/strided_loop.h — N-d iteration over up to 3 strided operands, for kernels (.cc only).
//
// Invariant: visits every index of `sizes` in row-major order exactly once and passes each operand's
// element offset (in elements, relative to its base pointer). Size-1 and stride-0 dims work (broadcast).
// Do not include from public headers: it is a template for kernel translation units.
//
// Example:
//   ForEachStrided<2>(out.sizes(), {out.strides(), in.strides()}, [&](const int64_t* off) {
//     o[off[0]] = f(x[off[1]]);
//   });
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace tessel {

template <int N, typename Fn>
void ForEachStrided(std::span<const int64_t> sizes, std::array<std::span<const int64_t>, N> strides, Fn&& fn,
                    int64_t begin = 0, int64_t end = -1) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (end < 0) end = numel;
  if (begin >= end) return;
  std::array<int64_t, N> off{};
  if (ndim == 0) {
    fn(off.data());
    return;
  }
  // Decompose `begin` into an index.
  std::vector<int64_t> idx(ndim, 0);
  int64_t rem = begin;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    idx[d] = rem % sizes[d];
    rem /= sizes[d];
  }
  for (int k = 0; k < N; ++k) {
    for (int64_t d = 0; d < ndim; ++d) off[k] += idx[d] * strides[k][d];
  }
  const int64_t inner = sizes[ndim - 1];
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = strides[k][ndim - 1];
  int64_t pos = begin;
  while (pos < end) {
    const int64_t run = std::min(inner - idx[ndim - 1], end - pos);
    for (int64_t i = 0; i < run; ++i) {
      fn(off.data());
      for (int k = 0; k < N; ++k) off[k] += inner_stride[k];
    }
    pos += run;
    if (pos >= end) break;
    // The row is complete: rewind the inner dim and carry into the outer dims.
    for (int k = 0; k < N; ++k) off[k] -= inner_stride[k] * inner;
    idx[ndim - 1] = 0;
    for (int64_t d = ndim - 2; d >= 0; --d) {
      ++idx[d];
      for (int k = 0; k < N; ++k) off[k] += strides[k][d];
      if (idx[d] < sizes[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= strides[k][d] * sizes[d];
      idx[d] = 0;
    }
  }
}

}  // namespace tessel
