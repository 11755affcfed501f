// core/ops/cuda/offset_calculator.h — element offsets of up to kMaxOperands strided operands for a
// linear output index: the index math of tessel's CUDA elementwise kernels, shared with the host so it
// is tested there against the CPU kernels' ForEachStrided (core/tensor/strided_loop.h).
//
// Invariant: for linear index i of `sizes` in row-major order, Get(i, off) writes off[k] =
// sum_d idx_d * strides[k][d] — exactly the offsets ForEachStrided passes for the same i. Make()
// first drops size-1 dims and merges adjacent dims that are contiguous for every operand (same result,
// fewer divisions per element on the device).
//
// Example (host side of a launch):
//   auto calc = OffsetCalculator<3>::Make(out.sizes(), {out.strides(), sa, sb});
//   // device: int64_t off[3]; calc.Get(i, off); po[off[0]] = pa[off[1]] + pb[off[2]];
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

inline constexpr int kMaxDims = 12;

// The strides that read a tensor of `sizes` / `strides` at every index of the broadcast `shape` (0 along
// leading and size-1 broadcast dims): the second span of an OffsetCalculator for broadcast operands.
inline std::vector<int64_t> BroadcastStrides(std::span<const int64_t> sizes, std::span<const int64_t> strides,
                                             std::span<const int64_t> shape) {
  std::vector<int64_t> out(shape.size(), 0);
  const size_t lead = shape.size() - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) out[lead + i] = sizes[i] == 1 ? 0 : strides[i];
  return out;
}

template <int N>
struct OffsetCalculator {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  TESSEL_HOST_DEVICE void Get(int64_t linear, int64_t* off) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }

  // REQUIRES: every strides[k] has sizes.size() entries; sizes.size() <= kMaxDims (else returns
  // ndim = -1; callers check).
  static OffsetCalculator Make(std::span<const int64_t> sizes, std::array<std::span<const int64_t>, N> strides) {
    OffsetCalculator c;
    // Keep non-trivial dims, outermost first.
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 1) continue;
      const bool merge = c.ndim > 0 && [&] {
        for (int k = 0; k < N; ++k) {
          if (c.strides[k][c.ndim - 1] != strides[k][d] * sizes[d]) return false;
        }
        return true;
      }();
      if (merge) {
        c.sizes[c.ndim - 1] *= sizes[d];
        for (int k = 0; k < N; ++k) c.strides[k][c.ndim - 1] = strides[k][d];
        continue;
      }
      if (c.ndim == kMaxDims) {
        c.ndim = -1;
        return c;
      }
      c.sizes[c.ndim] = sizes[d];
      for (int k = 0; k < N; ++k) c.strides[k][c.ndim] = strides[k][d];
      ++c.ndim;
    }
    return c;
  }
};

}  // namespace tessel::cuda
