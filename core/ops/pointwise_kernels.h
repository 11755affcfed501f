// core/ops/pointwise_kernels.h — internal to core/ops: float32 pointwise kernels whose cost is
// arithmetic, not memory traffic (GELU and its gradient: a rational tanh or erf per element; exp, sigmoid, silu), compiled
// once per vector ISA and chosen at run time, like core/ops/attention_kernels.h.
//
// Why by hand: the rest of core/ops runs elementwise math through Eigen at the build's x86-64-v3
// baseline (8 floats per vector). Eigen cannot be compiled a second time for AVX-512 in the same
// binary (its inline templates would be merged across the two copies by the linker and could run
// AVX-512 code on an AVX2-only CPU), so the two formulas that the GPT step's profile shows as
// compute-bound are written once with GCC vector extensions (pointwise_kernels.inc) and compiled
// for each ISA. The approximations are Eigen's (the same rational tanh and erf, the Cephes exp the
// attention kernels use), so both ISAs agree with the Eigen path to a few ulps.
//
// Invariant: the binary stays portable: only pointwise_kernels_avx512.cc is built with AVX-512 flags,
// its code has internal linkage and is reached only through ActivePointwiseKernels() after the cpuid
// check (core/ops/vector_isa.h). Results do not depend on how a caller splits the range (every element is computed alone).
//
// Example:
//   ActivePointwiseKernels().gelu(x, y, n, /*tanh_form=*/true);
#pragma once

#include <cstdint>

namespace tessel {

struct PointwiseKernels {
  const char* isa;  // "avx512" or "avx2"
  // y[i] = gelu(x[i]) for i < n: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) when tanh_form, else
  // 0.5·x·(1 + erf(x/√2)) (PyTorch's two forms). y may alias x.
  void (*gelu)(const float* x, float* y, int64_t n, bool tanh_form);
  // d[i] = g[i] · gelu'(x[i]); d may alias g or x.
  void (*gelu_backward)(const float* g, const float* x, float* d, int64_t n, bool tanh_form);
  // y[i] = e^(x[i] - offset), Eigen's pexp_float bit for bit (so the exp op and softmax give the same values on
  // both ISAs and as before), except where the result is below the smallest normal float: the caller's
  // (exact_math.h's ExpInto recomputes those with <cmath>). y may alias x.
  void (*exp)(const float* x, float offset, float* y, int64_t n);
  // y[i] = sigmoid(x[i]) = 1 / (1 + e^-x[i]), or silu(x[i]) = x[i] / (1 + e^-x[i]) when `silu`, with that exp
  // (Eigen's values of its expressions wherever Eigen ran packets). y may alias x.
  void (*sigmoid)(const float* x, float* y, int64_t n, bool silu);
};

const PointwiseKernels& Avx2PointwiseKernels();
const PointwiseKernels& Avx512PointwiseKernels();

// The variant ActiveVectorIsa() names (core/ops/vector_isa.h; tests force one there).
const PointwiseKernels& ActivePointwiseKernels();

}  // namespace tessel
