// core/ops/reduction.h — sum, mean, max/amax and vector norm over dims (keepdim like torch).
//
// Invariant: `dims` may be negative and lists each dim at most once; an empty `dims` reduces all dims.
// Floating sums accumulate in fp64 for float64 and in fp32 (pairwise per thread) otherwise.
//
// Example:
//   Tensor m_B1 = Mean(x_BC, {1}, /*keepdim=*/true);
//   auto [v, i] = Max(x_BC, 1);          // values and int64 indices (first max on ties)
#pragma once

#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor Mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor Amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Values and int64 indices along one dim.
std::pair<Tensor, Tensor> Max(const Tensor& x, int64_t dim, bool keepdim = false);
// Vector p-norm over dims (p = 2 by default; p = inf gives max |x|).
Tensor Norm(const Tensor& x, double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false);

}  // namespace tessel
