// core/ops/cuda/sgd_math.h — one SGD element update (weight decay, momentum with dampening, nesterov),
// shared by the CUDA kernel (core/ops/optimizer.cu) and a host test that holds it against the CPU kernel
// of "sgd_step_" (core/ops/optimizer.cc).
//
// Invariant: the CPU kernel's formula and operation order in float32:
//   d = g + wd*p;  with a buffer and momentum != 0: b = first ? d : mom*b + (1-damp)*d, stored;
//   d = nesterov ? d + mom*b : b;  p = p - lr*d
// where the stored buffer is rounded to the parameter dtype but d uses the unrounded b, as on the CPU.
//
// Example:
//   const SgdScalars s = SgdScalars::Make(lr, momentum, dampening, wd, nesterov, first);
//   SgdUpdate(s, g, p, has_buffer ? &b : nullptr);
#pragma once

#include "core/ops/cuda/host_device.h"

namespace tessel::cuda {

struct SgdScalars {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first;
  static SgdScalars Make(double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                         bool first) {
    return {static_cast<float>(lr), static_cast<float>(momentum), static_cast<float>(1 - dampening),
            static_cast<float>(weight_decay), nesterov, first};
  }
};

TESSEL_HOST_DEVICE inline void SgdUpdate(const SgdScalars& s, float g, float& p, float* buf) {
  float d = g + s.weight_decay * p;
  if (buf != nullptr && s.momentum != 0) {
    const float b = s.first ? d : s.momentum * *buf + s.one_minus_dampening * d;
    *buf = b;
    d = s.nesterov ? d + s.momentum * b : b;
  }
  p = p - s.lr * d;
}

}  // namespace tessel::cuda
