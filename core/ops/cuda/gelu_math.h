// core/ops/cuda/gelu_math.h — gelu and its gradient per element for tessel's CUDA unary kernel
// (core/ops/unary.cu), shared with a host test against the CPU ops "gelu" / "gelu_backward"
// (core/ops/unary.cc, PyTorch's formulas).
//
// Invariant: fp32 math, PyTorch's formulas:
//   exact  y = x/2 (1 + erf(x/√2)),            dy = g (Φ(x) + x φ(x))
//   tanh   y = x/2 (1 + tanh(β (x + κ x³))),   dy = g (½(1 + th) + ½ x (1 - th²) β (1 + 3κ x²))
// with β = √(2/π), κ = 0.044715. The CPU uses Eigen's vectorized erf/tanh, so the two agree to ~1e-6.
//
// Example:
//   out[i] = GeluOut(x[i], /*tanh=*/true);   dx[i] = GeluGrad(g[i], x[i], true);
#pragma once

#include <cmath>

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

inline constexpr float kGeluBeta = 0.7978845608028654f;  // √(2/π)
inline constexpr float kGeluKappa = 0.044715f;
inline constexpr float kSqrtHalf = 0.7071067811865476f;
inline constexpr float kInvSqrt2Pi = 0.3989422804014327f;

TESSEL_HOST_DEVICE inline float GeluOut(float x, bool tanh_approx) {
  if (tanh_approx) return 0.5f * x * (1.0f + tanhf(kGeluBeta * (x + kGeluKappa * x * x * x)));
  return x * 0.5f * (1.0f + erff(x * kSqrtHalf));
}

TESSEL_HOST_DEVICE inline float GeluGrad(float g, float x, bool tanh_approx) {
  if (tanh_approx) {
    const float th = tanhf(kGeluBeta * (x + kGeluKappa * x * x * x));
    const float inner = kGeluBeta * (1.0f + 3.0f * kGeluKappa * x * x);
    return g * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * inner);
  }
  const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
  return g * (cdf + x * expf(-0.5f * x * x) * kInvSqrt2Pi);
}

}  // namespace tessel::cuda
