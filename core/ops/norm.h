// core/ops/norm.h — layer_norm and rms_norm over the last dim, with fused backward kernels (and over several
// trailing dims through a view of them as one).
//
// Example:
//   Tensor y_BTC = LayerNorm(x_BTC, w_C, b_C, 1e-5);   // weight/bias may be undefined
//   Tensor z_BTC = RmsNorm(x_BTC, w_C, 1e-6);
//   Tensor y_NCHW = LayerNormOver(x_NCHW, {C, H, W}, w_CHW, b_CHW, 1e-5);
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// torch's layer_norm / rms_norm over the trailing dims `normalized_shape` (weight and bias of that shape, or
// undefined): x's trailing dims must be normalized_shape (kInvalidArgument naming both, torch's message);
// several dims view x as [..., prod(normalized_shape)] for the ops above and the result back. RmsNormOver takes a
// weight of another floating dtype as torch's unfused path does (the result in x's dtype).
Tensor LayerNormOver(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                     double eps);
Tensor RmsNormOver(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps);

}  // namespace tessel
