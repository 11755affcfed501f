// core/tensor/torch_random.h — torch's CPU uniform_ and normal_ on a generator's host stream, value for value.
//
// What a seeded torch script draws on the CPU (torch.rand / randn, Tensor.uniform_ / normal_, and through them
// nn.init and every module's reset_parameters) is defined by aten's CPU kernels over its MT19937 words. These
// functions are those kernels on the Generator's host stream (random.h), so the Python face's plain tensors get
// the values torch gives: a model built after `manual_seed(s)` starts from torch's weights.
//
// The kernels, as aten's (DistributionTemplates.h) on a CPU with AVX2, the one every tessel build requires:
//   uniform(from, to), float-computed dtypes: one word w per element, u = (w mod 2^24)·2^-24 and
//     fma(u, to - from, from) in float, rounded to the dtype; a value that rounds to `to` becomes
//     `from`.
//     float64: two words (the first the high half), 53 bits, in double.
//   normal(mean, std), a contiguous tensor of >= 16 elements: uniforms u[0..n) as uniform(0, 1), then per block
//     of 16 the Box-Muller pairs (1 - u[j], u[j+8]) for j < 8: r = sqrt(-2·log(1 - u[j])), θ = 2π·u[j+8],
//     out[j] = fma(r·cos θ, std, mean), out[j+8] = fma(r·sin θ, std, mean); when 16 does not divide n, 16 fresh
//     uniforms redo the last 16 elements. float32 / bfloat16 / float16 compute in float with the Cephes log and
//     sincos of avx_mathfun.h (torch's AVX2 NormalFill16) and round at the end; float64 with libm's.
//   normal otherwise (under 16 elements, or not contiguous): per element Box-Muller in double from two 53-bit
//     uniforms u1, u2: r = sqrt(-2·log1p(-u2)), θ = 2π·u1, the value fma(r·cos θ, std, mean) and r·sin θ
//     kept by the generator for its next such element (Generator::next_normal).
//   Elements are visited in memory order (aten's TensorIterator orders dims by stride).
// Where torch's CPU capability is "default" (no AVX2, or ATEN_CPU_CAPABILITY=default) its kernels differ in the
// last bits: no fused multiply-adds where the compiler would contract, libm's logf / cosf / sinf for float. Both
// are here (TorchCpuKernels), so a test on any machine checks both against torch's printed values.
//
// Why by hand: the values are defined by aten's kernels and the avx_mathfun.h polynomials (zlib-licensed,
// Cephes); no library reproduces the sequence, and libm's or Sleef's log / sincos differ in the last bit.
//
// Example:
//   Generator gen(0);
//   Tensor w = Empty({5, 7});
//   TorchUniform(w, gen, -b, b);     // torch.manual_seed(0); torch.empty(5, 7).uniform_(-b, b)
#pragma once

#include "core/tensor/random.h"
#include "core/tensor/tensor.h"

namespace tessel {

// torch's CPU capability as its distribution kernels see it: kAvx2 (also what AVX-512 CPUs run) unless the
// environment's ATEN_CPU_CAPABILITY says "default".
enum class TorchCpuKernels { kAuto, kDefault, kAvx2 };
TorchCpuKernels ActiveTorchCpuKernels();
// Test-only: pins the kernels (kAuto restores the environment's choice).
void ForceTorchCpuKernelsForTesting(TorchCpuKernels kernels);

// out (a dense CPU tensor of a floating dtype, any strides) = torch's uniform_(from, to) / normal_(mean, std)
// from gen's host stream. kInvalidArgument for other dtypes (torch's "not implemented" message), from > to, std < 0.
// Bumps out's version. Not recorded by autograd.
void TorchUniform(const Tensor& out, Generator& gen, double from, double to);
void TorchNormal(const Tensor& out, Generator& gen, double mean, double std);
// The per-element kernels, in memory order, from 53-bit uniforms u (aten's *_distribution<double>):
//   log_normal_: exp of normal_'s one-at-a-time value (sharing its cache); cauchy_: median + σ·tan(π·(u - ½));
//   geometric_: ceil(log(u) / log1p(-p)) (any dtype); bernoulli_(p): u < p (any dtype).
void TorchLogNormal(const Tensor& out, Generator& gen, double mean, double std);
void TorchCauchy(const Tensor& out, Generator& gen, double median, double sigma);
void TorchGeometric(const Tensor& out, Generator& gen, double p);
void TorchBernoulli(const Tensor& out, Generator& gen, double p);
// bernoulli_(p) with a tensor of probabilities of out's shape: u < p[i] with u of 24 bits compared in float for
// float32 / bfloat16 / float16 probabilities, of 53 bits in double for float64 ones.
void TorchBernoulli(const Tensor& out, Generator& gen, const Tensor& p);

// torch._standard_gamma(a), torch.poisson(a), torch.binomial(a, b) (count a, probability b) on the CPU: out[i]
// from a[i] (and b[i]), all of out's shape and dtype (float32 or float64), by aten's rejection samplers (Marsaglia
// and Tsang's gamma, Hörmann's PTRS and BTRS) from the host stream's doubles and one-at-a-time normals. A gamma
// sample is at least the dtype's smallest normal, as aten's.
enum class TorchSampler { kStandardGamma, kPoisson, kBinomial };
void TorchSample(const Tensor& out, Generator& gen, TorchSampler sampler, const Tensor& a, const Tensor& b);

}  // namespace tessel
