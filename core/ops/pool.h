// core/ops/pool.h — max pooling as one gather-and-compare over precomputed windows, and the per-row
// gather / scatter-add pair its gradients are made of.
//
// The window geometry (kernel, stride, padding, dilation, ceil_mode: torch's output-size rules) is the
// caller's: tessel.nn.functional builds the [K, O] index of input positions once per geometry (its
// _max_window_index, with padding taps redirected to the window's first input tap) and these kernels only
// read it, so every pooling form shares one tested geometry and the C++ side stays small.
//
// Example (a 2×2 max pool of planes of 4×4 = 16 positions into 4 outputs):
//   auto [values, arg] = WindowMax(x_P16, index_K4O4);   // values [P, 4], arg [P, 4] int64 positions
//   Tensor dx = ScatterAddLastDim(dvalues, arg, 16);     // the gradient: [P, 16]
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor/tensor.h"

namespace tessel {

// x [P, L] (floating), index [K, O] int64 in [0, L): values[p, o] = max_k x[p, index[k, o]] and
// arg[p, o] the position it came from. Ties keep the first k; a NaN wins and the last NaN's position
// is kept (torch's max_pool rule: val > max || isnan(val)). Differentiable in x (the gradient goes to
// arg's positions); arg is not differentiable. An index outside [0, L): kOutOfRange.
std::pair<Tensor, Tensor> WindowMax(const Tensor& x, const Tensor& index);

// out[p, o] = x[p, idx[p, o]] for x [P, L], idx [P, O] int64 (torch.gather along the last dim).
Tensor GatherLastDim(const Tensor& x, const Tensor& idx);
// out [P, length] zeros with out[p, idx[p, o]] += src[p, o] (torch's scatter_add along the last dim),
// summed in o order. GatherLastDim and ScatterAddLastDim are each other's gradient.
Tensor ScatterAddLastDim(const Tensor& src, const Tensor& idx, int64_t length);

}  // namespace tessel
