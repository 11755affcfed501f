// core/ops/cuda/testing/wave.h — the deterministic, non-periodic test values shared by the CUDA kernels'
// host tests (core/ops/cuda/*_test.cc) and GPU tests (core/ops/*_cuda_test.cc).
//
// Invariant: element i is amplitude * sin(0.731 i + seed) + 0.5 cos(1.37 i seed), rounded once to dtype;
// distinct seeds give unrelated tensors, and no two lanes of a small tensor repeat.
//
// Example:
//   const Tensor x = Wave({4, 300}, DType::kBFloat16, /*seed=*/1);
#pragma once

#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel::cuda::testing {

inline Tensor Wave(const std::vector<int64_t>& shape, DType dtype, int seed, double amplitude = 3.0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = amplitude * std::sin(0.731 * i + seed) + 0.5 * std::cos(1.37 * i * seed);
  return FromDoubles(v, shape, dtype);
}

// t's elements as raw bytes in row-major order (bitwise comparisons: -0 and +0 differ, NaN payloads count).
inline std::vector<uint8_t> RawBytes(const Tensor& t) {
  Tensor c = Empty(t.sizes(), t.dtype(), Device::Cpu());
  CopyInto(c, t);
  std::vector<uint8_t> v(static_cast<size_t>(c.numel() * ElementSize(c.dtype())));
  std::memcpy(v.data(), c.raw_data(), v.size());
  return v;
}

}  // namespace tessel::cuda::testing
