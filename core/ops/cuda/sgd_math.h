// core/ops/cuda/sgd_math.h — one SGD element update (weight decay, momentum with dampening, nesterov),
// shared by the CUDA kernel (core/ops/optimizer.cu) and a host test that holds it against the CPU kernel
// of "sgd_step_" (core/ops/optimizer.cc).
//
// Invariant: the CPU kernel's formula, torch's single-tensor SGD one op at a time, each result rounded to the
// stored dtype T (float, or bfloat16 held as uint16_t), each add with alpha one fused multiply-add, and each
// alpha (wd, 1-damp, the nesterov momentum, -lr; not buf.mul_'s momentum) rounded to T first:
//   d = wd != 0 ? fma(wd, p, g) : g;  with a buffer and momentum != 0: b = first ? d : fma(1-damp, d, mom*b),
//   stored;  d = nesterov ? fma(mom, b, d) : b;  p = fma(-lr, d, p).
//
// Example:
//   const SgdScalars s = SgdScalars::Make(lr, momentum, dampening, wd, nesterov, first);
//   SgdUpdate<float>(s, g, p, has_buffer ? &b : nullptr);  // SgdUpdate<uint16_t>: bfloat16 storage
#pragma once

#include <cmath>

#include "core/ops/cuda/bf16.h"
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

// v rounded to the stored dtype T and widened back.
template <typename T>
TESSEL_HOST_DEVICE inline float RoundedTo(float v) {
  if constexpr (sizeof(T) == 2) {
    return Bf16ToFloat(FloatToBf16(v));
  } else {
    return v;
  }
}

template <typename T>
TESSEL_HOST_DEVICE inline void SgdUpdate(const SgdScalars& s, float g, float& p, float* buf) {
  // an add's alpha in the stored dtype first (torch's vector kernels), the multiplier of buf.mul_ as it is
  const float wd = RoundedTo<T>(s.weight_decay), mom = RoundedTo<T>(s.momentum);
  const float damp = RoundedTo<T>(s.one_minus_dampening), lr = RoundedTo<T>(s.lr);
  float d = s.weight_decay != 0 ? RoundedTo<T>(fmaf(wd, p, g)) : g;
  if (buf != nullptr && s.momentum != 0) {
    const float b = s.first ? d : RoundedTo<T>(fmaf(damp, d, RoundedTo<T>(s.momentum * *buf)));
    *buf = b;
    d = s.nesterov ? RoundedTo<T>(fmaf(mom, b, d)) : b;
  }
  p = RoundedTo<T>(fmaf(-lr, d, p));
}

}  // namespace tessel::cuda
