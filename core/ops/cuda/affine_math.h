// core/ops/cuda/affine_math.h — the per-element formula of the CUDA scalar / in-place elementwise kernels
// (core/ops/elementwise_scalar.cu): add_scalar, mul_scalar, mul_ and add_ as one affine step, shared with
// a host test (affine_math_test.cc) that runs it in the kernel's order against the CPU ops bit for bit.
//
// Invariant: out = a * alpha, then + b * beta when has_b, then + gamma when has_gamma, in float32 with
// every product and sum rounded on its own (no FMA contraction: the CPU build is ISO C++20, so GCC
// contracts nothing either), bfloat16 widened on load and rounded once on store (cuda/bf16.h). The CPU
// kernels' expressions map onto it as: add_scalar x*1 + v, mul_scalar and mul_ x*v + 0 (the CPU adds the
// zero too, turning -0 into +0), add_ d*1 + s*alpha.
//
// Example:
//   const AffineParams p{.alpha = v, .beta = 0, .gamma = 0, .has_b = false, .has_gamma = true};   // mul_scalar
//   StoreF(out, i, Affine(LoadF(x, i), 0.0f, p));
#pragma once

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

struct AffineParams {
  float alpha, beta, gamma;
  bool has_b, has_gamma;
};

TESSEL_HOST_DEVICE inline float Affine(float a, float b, const AffineParams& p) {
#ifdef __CUDA_ARCH__
  float r = __fmul_rn(a, p.alpha);
  if (p.has_b) r = __fadd_rn(r, __fmul_rn(b, p.beta));
  if (p.has_gamma) r = __fadd_rn(r, p.gamma);
#else
  float r = a * p.alpha;
  if (p.has_b) r = r + b * p.beta;
  if (p.has_gamma) r = r + p.gamma;
#endif
  return r;
}

}  // namespace tessel::cuda
