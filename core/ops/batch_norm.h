// core/ops/batch_norm.h — training-mode batch normalization (torch.nn.functional.batch_norm with
// training=True): each channel of x [N, C, *] normalized by its mean and biased variance over the batch and
// spatial dims, then scaled and shifted; fused forward and backward kernels (float32, float64, and
// bfloat16 x with float32 weight, bias and statistics as torch's mixed batch norm; CPU; sums in float64).
//
// The running statistics are the caller's (tessel.nn.functional blends them from mean and var, with the
// unbiased variance, as torch). Evaluation mode is an affine map of x, composed by the caller.
//
// Example:
//   auto [y, mean, var] = BatchNormTraining(x_NCHW, gamma_C, beta_C, 1e-5);
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

struct BatchNormResult {
  Tensor y;          // x's shape; differentiable in x, weight and bias (gradients of gradients too)
  Tensor mean, var;  // [C], the batch statistics (var biased; float32 for a bfloat16 x); not differentiable
};

// weight and bias [C] or undefined. kInvalidArgument: fewer than 2 values per channel (torch's "Expected
// more than 1 value per channel when training"), other dtypes, mismatched shapes.
BatchNormResult BatchNormTraining(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

}  // namespace tessel
