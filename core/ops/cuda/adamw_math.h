// core/ops/cuda/adamw_math.h — one AdamW element update, shared by the fused CUDA kernel
// (core/ops/optimizer.cu) and a host test that holds it against the CPU kernel (core/ops/optimizer.cc).
//
// Invariant: the same formula and operation order as the CPU kernel in fp32:
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;  p = p*(1 - lr*wd) - step_size * m / (sqrt(v)/sqrt(bc2) + eps)
// with step_size = lr / (1 - b1^step) and bc2 = 1 - b2^step computed once per step on the host (double).
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
  float b1, b2, eps, decay, step_size, bc2_sqrt;
  static AdamWScalars Make(double lr, double b1, double b2, double eps, double wd, int64_t step) {
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
    return {static_cast<float>(b1),         static_cast<float>(b2),        static_cast<float>(eps),
            static_cast<float>(1.0 - lr * wd), static_cast<float>(lr / bc1), static_cast<float>(std::sqrt(bc2))};
  }
};

TESSEL_HOST_DEVICE inline void AdamWUpdate(const AdamWScalars& s, float g, float& p, float& m, float& v) {
  m = s.b1 * m + (1 - s.b1) * g;
  v = s.b2 * v + (1 - s.b2) * g * g;
  const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
  p = p * s.decay - s.step_size * m / denom;
}

}  // namespace tessel::cuda
