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
// torch.any (all = false) / torch.all of a local CPU tensor over every dim (dims empty) or one dim: whether any /
// every element is nonzero (NaN counts as nonzero), as bool, or as uint8 for a uint8 input (torch's). Not an op: no
// autograd (the results are boolean) and no DTensor; the Python face's direct path for plain tensors (its
// DTensors compose any / all from ops). Undefined for what it does not cover (several dims, not a CPU tensor).
Tensor AnyAllLocal(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool all);

}  // namespace tessel
