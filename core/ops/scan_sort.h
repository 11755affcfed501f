// core/ops/scan_sort.h — running sums along a dim (torch.cumsum) and the sorting permutation of each row
// (the indices of torch.sort / argsort / topk), the kernels behind the Python face's cumsum, sort, argsort
// and topk (which were a Python log-step scan and numpy's single-threaded argsort: 20-25x torch's time).
//
// Example:
//   Tensor c = CumSum(x, /*dim=*/1);                               // differentiable
//   Tensor order = SortIndicesLastDim(x_PL, /*descending=*/true);  // [P, L] int64, stable
//   Tensor top = TopKIndicesLastDim(x_PL, 5, /*largest=*/true);    // [P, 5]: torch.topk's indices
#pragma once

#include <cstdint>

#include "core/tensor/tensor.h"

namespace tessel {

// out[..., i, ...] = sum of x[..., j, ...] for j <= i along `dim` (j >= i with `reverse`), added in that
// order as torch's CPU kernel: float32 and float64 in a float64 accumulator, 16-bit floats in float32, the
// integer dtypes in int64; each output element rounded to x's dtype. Differentiable (the gradient is the
// reverse running sum). kInvalidArgument for bool (torch's cumsum of bools is int64: convert first).
Tensor CumSum(const Tensor& x, int64_t dim, bool reverse = false);

// x [P, L]: per row, the positions in sorted order, ascending or descending, ties in position order
// (stable; torch's stable=True, and what its CPU sort gives), NaN above every number (last ascending, first
// descending, as torch). k in [0, L] keeps the first k of each row (topk's indices, sorted); k < 0 keeps all.
// Not differentiable: gather the values with GatherDim (index_dim.h). int64 [P, k].
Tensor SortIndicesLastDim(const Tensor& x, bool descending, int64_t k = -1);

// x [P, L]: per row, the positions torch.topk(row, k, largest=largest, sorted=sorted) returns on the CPU, in its
// order, ties included (its libstdc++ partial_sort / nth_element calls on (value, position) pairs compared by
// value; NaN above every number). int64 [P, k]; kOutOfRange unless 0 <= k <= L.
Tensor TopKIndicesLastDim(const Tensor& x, int64_t k, bool largest, bool sorted = true);

}  // namespace tessel
