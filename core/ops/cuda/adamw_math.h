// core/ops/cuda/adamw_math.h — one AdamW element update, shared by the fused CUDA kernel
// (core/ops/optimizer.cu) and a host test that holds it against the CPU kernel (core/ops/optimizer.cc).
//
// Invariant: the same formula and operation order as the CPU kernel in fp32:
//   m = lerp(m, g, w1);  v = b2*v + w2*g*g;  p = p*(1 - lr*wd) - step_size * m / (sqrt(v)/sqrt(bc2) + eps)
// with w1 = 1-b1 and w2 = 1-b2 (torch's weights: computed in double, then rounded), torch's two-sided lerp,
// step_size = lr / (1 - b1^step) and bc2 = 1 - b2^step computed once per step on the host (double).
//
// Example:
//   const AdamWScalars s = AdamWScalars::Make(lr, b1, b2, eps, wd, step);
//   AdamWUpdate(s, g, p, m, v);   // p, m, v updated in place (float)
#pragma once

#include <cmath>
#include <cstdint>

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

struct AdamWScalars {
  float w1, b2, w2, eps, decay, step_size, bc2_sqrt;
  bool low_w1;  // w1 < 0.5: lerp's m + w1 (g - m) branch
  static AdamWScalars Make(double lr, double b1, double b2, double eps, double wd, int64_t step) {
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
    return {static_cast<float>(1.0 - b1),      static_cast<float>(b2),        static_cast<float>(1.0 - b2),
            static_cast<float>(eps),           static_cast<float>(1.0 - lr * wd), static_cast<float>(lr / bc1),
            static_cast<float>(std::sqrt(bc2)), 1.0 - b1 < 0.5};
  }
};

TESSEL_HOST_DEVICE inline void AdamWUpdate(const AdamWScalars& s, float g, float& p, float& m, float& v) {
  m = s.low_w1 ? m + s.w1 * (g - m) : g - (g - m) * (1 - s.w1);
  v = s.b2 * v + s.w2 * g * g;
  const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
  p = p * s.decay - s.step_size * m / denom;
}

}  // namespace tessel::cuda
