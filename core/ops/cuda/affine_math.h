// core/ops/cuda/affine_math.h — the per-element formula of the CUDA scalar / in-place elementwise kernels
// (core/ops/elementwise_scalar.cu): add_scalar, mul_scalar, mul_ and add_ as one affine step, shared with
// a host test (affine_math_test.cc) that runs it in the kernel's order against the CPU ops bit for bit.
//
// Invariant: r = a * alpha (rounded), then r = fma(b, beta, r) when has_b (one rounding, as the CPU add_
// kernel's explicit std::fma and torch's fused add kernels on both devices), then r + gamma when has_gamma,
// in float32, bfloat16 widened on load and rounded once on store (cuda/bf16.h). Every step is spelled
// out (intrinsics on the device, std::fma on the host) so no compiler's contraction choice moves a bit:
// GCC contracts a*b+c in C++ even under -std=c++20 (the first H200 run caught the device's separately
// rounded add_ one ulp off the CPU's contracted one). The CPU kernels' expressions map onto it as:
// add_scalar x*1 + v, mul_scalar and mul_ x*v (no + 0, so -3 * 0 is -0 as torch's mul), add_ fma(s, alpha, d*1).
//
// Example:
//   const AffineParams p{.alpha = v, .beta = 0, .gamma = 0, .has_b = false, .has_gamma = false};  // mul_scalar
//   StoreF(out, i, Affine(LoadF(x, i), 0.0f, p));
#pragma once

#include <cmath>

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

struct AffineParams {
  float alpha, beta, gamma;
  bool has_b, has_gamma;
};

TESSEL_HOST_DEVICE inline float Affine(float a, float b, const AffineParams& p) {
#ifdef __CUDA_ARCH__
  float r = __fmul_rn(a, p.alpha);
  if (p.has_b) r = __fmaf_rn(b, p.beta, r);
  if (p.has_gamma) r = __fadd_rn(r, p.gamma);
#else
  float r = a * p.alpha;
  if (p.has_b) r = std::fma(b, p.beta, r);
  if (p.has_gamma) r = r + p.gamma;
#endif
  return r;
}

}  // namespace tessel::cuda
