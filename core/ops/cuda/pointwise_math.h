// core/ops/cuda/pointwise_math.h — the formulas of the CUDA unary pointwise kernels beyond gelu
// (core/ops/unary_pointwise.cu): neg, exp, log, sqrt, rsqrt, pow, tanh, sigmoid, relu, silu, abs, clamp and
// the fused backward ops tanh_backward, sigmoid_backward, threshold_backward, silu_backward, abs_backward,
// clamp_backward, shared with a host test (pointwise_math_test.cc) against the CPU ops (core/ops/unary.cc).
//
// Invariant: float32 math in the CPU kernels' operation order (their Eigen expressions written out), one
// rounding to bfloat16 on store. neg, abs, relu, clamp, pow by 1 / 2 / 3 and the threshold, abs and clamp
// gradients are exact, hence bitwise the CPU's; sqrt (correctly rounded here, not in Eigen's fast float
// path), exp, log, tanh, sigmoid, silu, rsqrt and general pow may differ from Eigen's vectorized functions
// in the last bits (tests: 4 float32 ulps, one bf16 ulp). NaN propagates as on the CPU (relu and clamp
// keep NaN).
//
// Example:
//   const float y = ApplyPointwise(PointwiseOp::kSilu, x, {});
#pragma once

#include <cmath>
#include <cstdint>

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

enum class PointwiseOp : uint8_t {
  kNeg, kExp, kLog, kSqrt, kRsqrt, kPow, kTanh, kSigmoid, kRelu, kSilu, kAbs, kClamp,
  kSin, kCos, kErf, kLog1p, kExpm1, kExp2, kFloor, kCeil, kRound
};
enum class PointwiseGradOp : uint8_t { kTanh, kSigmoid, kThreshold, kSilu, kAbs, kClamp };

struct PointwiseParams {
  float exponent;  // pow
  float lo, hi;    // clamp, clamp_backward; lo is threshold_backward's threshold
};

// torch's special exponents (its CPU and CUDA pow kernels): square, cube, sqrt, 1 / sqrt, reciprocal and the
// reciprocal of the square, the CPU ops' formulas. One rounding to bf16 at the store, as torch's CUDA kernel (its
// CPU kernel rounds bf16 x·x first for x ** 3 and x ** -2: core/ops/unary.cc).
TESSEL_HOST_DEVICE inline float PowOf(float x, float e) {
  if (e == 2.0f) return x * x;
  if (e == 3.0f) return x * x * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == -0.5f) return 1.0f / sqrtf(x);
  if (e == -1.0f) return 1.0f / x;
  if (e == -2.0f) return 1.0f / (x * x);
  if (e == 1.0f) return x;
  return powf(x, e);
}

TESSEL_HOST_DEVICE inline float ApplyPointwise(PointwiseOp op, float x, const PointwiseParams& p) {
  switch (op) {
    case PointwiseOp::kNeg: return -x;
    case PointwiseOp::kExp: return expf(x);
    case PointwiseOp::kLog: return logf(x);
    case PointwiseOp::kSqrt: return sqrtf(x);
    case PointwiseOp::kRsqrt: return 1.0f / sqrtf(x);
    case PointwiseOp::kPow: return PowOf(x, p.exponent);
    case PointwiseOp::kTanh: return tanhf(x);
    case PointwiseOp::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case PointwiseOp::kRelu: return x < 0.0f ? 0.0f : x;
    case PointwiseOp::kSilu: return x / (1.0f + expf(-x));
    case PointwiseOp::kAbs: return fabsf(x);
    case PointwiseOp::kClamp: {
      const float v = x < p.lo ? p.lo : x;
      return v > p.hi ? p.hi : v;
    }
    case PointwiseOp::kSin: return sinf(x);
    case PointwiseOp::kCos: return cosf(x);
    case PointwiseOp::kErf: return erff(x);
    case PointwiseOp::kLog1p: return log1pf(x);
    case PointwiseOp::kExpm1: return expm1f(x);
    case PointwiseOp::kExp2: return exp2f(x);
    case PointwiseOp::kFloor: return floorf(x);
    case PointwiseOp::kCeil: return ceilf(x);
    case PointwiseOp::kRound: return rintf(x);  // half to even
  }
  return x;
}

// d = f(g, t) with t the saved tensor (tanh / sigmoid: the output; the others: the input).
TESSEL_HOST_DEVICE inline float ApplyPointwiseGrad(PointwiseGradOp op, float g, float t, const PointwiseParams& p) {
  switch (op) {
    case PointwiseGradOp::kTanh: return g * (1.0f - t * t);
    case PointwiseGradOp::kSigmoid: return g * t * (1.0f - t);
    case PointwiseGradOp::kThreshold: return t <= p.lo ? 0.0f : g;
    case PointwiseGradOp::kAbs: return g * static_cast<float>((t > 0.0f) - (t < 0.0f));
    case PointwiseGradOp::kClamp:  // torch 2.15: 0 at a bound; an absent bound is +-inf and passes
      return ((p.lo == -HUGE_VALF || t > p.lo) && (p.hi == HUGE_VALF || t < p.hi)) ? g : 0.0f;
    case PointwiseGradOp::kSilu: {
      const float s = 1.0f / (1.0f + expf(-t));
      return g * s * (1.0f + t * (1.0f - s));
    }
  }
  return g;
}

}  // namespace tessel::cuda
