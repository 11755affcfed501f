// core/ops/matmul.h — matmul (batched, broadcasting, torch.matmul rules) and linear, on the BLAS GEMM.
//
// Invariant: transposed/strided operands are read in place when their inner stride is 1 (no copy);
// 16-bit floats are converted to fp32 for the GEMM and rounded back once.
//
// Example:
//   Tensor y_BTO = Linear(x_BTI, w_OI, b_O);     // x @ w^T + b
//   Tensor s_BHTT = Matmul(q_BHTD, Transpose(k_BHTD, -2, -1));
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor Matmul(const Tensor& a, const Tensor& b);
// bias may be undefined.
Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tessel
