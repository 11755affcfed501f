// core/ops/norm.h — layer_norm and rms_norm over the last dim, with fused backward kernels.
//
// Example:
//   Tensor y_BTC = LayerNorm(x_BTC, w_C, b_C, 1e-5);   // weight/bias may be undefined
//   Tensor z_BTC = RmsNorm(x_BTC, w_C, 1e-6);
#pragma once

#include "core/tensor/tensor.h"

namespace tessel {

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace tessel
