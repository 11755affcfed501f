// core/ops/grouped_mm.h — GroupedMm (torch._grouped_mm): the per-expert GEMMs of a Mixture-of-Experts
// layer, one product per group with jagged group sizes, in torch's four layouts (G groups; `ends[g]` is
// where group g ends along the jagged dim, group g spans [ends[g - 1], ends[g])):
//   2-D a [M, K] x 3-D b [G, K, N] -> [M, N]      out[s:e] = a[s:e] @ b[g]      (tokens sorted by expert)
//   2-D a [M, K] x 2-D b [K, N]    -> [G, M, N]   out[g] = a[:, s:e] @ b[s:e]   (the weight gradients)
//   3-D a [G, M, K] x 2-D b [K, N] -> [M, N]      out[:, s:e] = a[g] @ b[:, s:e]
//   3-D a [G, M, K] x 3-D b [G, K, N] -> [G, M, N] out[g] = a[g] @ b[g]          (`ends` empty)
// The output past ends.back() along the jagged dim, and an empty group's block in the 2-D x 2-D layout,
// are zeros. Differentiable: each gradient is one GroupedMm of transposed views (grouped_mm.cc), so the
// backward is differentiable too.
//
// Invariant: operands of any strides Gemm reads in place (a transposed view included) are not copied;
// each product is one Gemm writing its block of the output directly, 16-bit products rounded once.
//
// Example (10 tokens routed to 3 experts: 4, 0 and 6 tokens):
//   Tensor y = GroupedMm(x_10x64, w_3x64x128, {4, 4, 10});     // [10, 128]
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {

// REQUIRES: a and b of one floating dtype, 2-D or 3-D, with torch's shape rules above; `ends`
// non-decreasing and at most the jagged dim's size, one per group (empty exactly for 3-D x 3-D):
// kInvalidArgument otherwise, naming the shapes and the offsets.
Tensor GroupedMm(const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends);

}  // namespace tessel
