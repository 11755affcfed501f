// core/ops/linear_forward.h — internal to core/ops: the pieces of op "linear" (core/ops/matmul.cc) that
// the fused op "linear_gelu" (core/ops/linear_gelu.cc) reuses: the argument checks, the forward with a
// per-panel epilogue, and the input gradients.
//
// Invariant: linear_gelu's pre-activation is computed by exactly the code that computes linear's
// output (same GEMM call, same bias epilogue), so the two agree bit for bit; the extra epilogue only
// reads the finished rows of the product and writes elsewhere.
//
// Example (float32 x [R, I], w [N, I], b [N], y [R, N]):
//   Tensor pre = LinearForward("linear_gelu", x, w, b, [&](const Tensor& acc, int64_t r0, int64_t r1,
//                                                          int64_t c0, int64_t c1) { /* read acc rows */ });
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/tensor/tensor.h"

namespace tessel {

// Argument checks of linear under the op name `op` (kInvalidArgument naming the op and shapes):
// weight 2-D [out, in], x [..., in], bias undefined or [out] of x's dtype.
void CheckLinearArgs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);

// Runs on rows [row_begin, row_end) × cols [col_begin, col_end) of `acc`, the contiguous product viewed
// as [rows, out_features] in the compute dtype (float32, or float64 for float64 inputs), after the bias
// was added there; the thread that computed those rows runs it (core/ops/gemm.h, [Note: GEMM epilogue]).
using LinearEpilogue =
    std::function<void(const Tensor& acc, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end)>;

// x · weightᵀ + bias in x's dtype, then `after` (optional) on every panel of the compute-type product.
// REQUIRES: CheckLinearArgs(op, x, weight, bias) passed.
Tensor LinearForward(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const LinearEpilogue& after = nullptr);

// (grad_x, grad_weight, grad_bias) of y = x · weightᵀ + bias given grad_y, as "matmul" and "sum_to_size"
// calls (so they run distributed on DTensors); an entry is undefined where needs[i] is false (needs[2]
// holds only for a defined bias that requires grad).
TensorList LinearInputGrads(const Tensor& x, const Tensor& weight, const Tensor& grad_y, std::span<const bool> needs);

}  // namespace tessel
