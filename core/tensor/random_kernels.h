// core/tensor/random_kernels.h — the vectorized draws behind FillRandomBlock (random.h): Philox4x32-10 for
// 8 or 16 consecutive counters at once, and the uniform / normal transforms in double precision, one copy
// per vector ISA (random_kernels_avx2.cc, random_kernels_avx512.cc, chosen at run time by
// core/ops/vector_isa.h).
//
// What element i of a run is (the values random.h promises, the same on every CPU and in every block):
// counter c = c0 + i gives the Philox block r = Philox4x32({c mod 2^32, c / 2^32, 0, 0}, {seed mod 2^32,
// seed / 2^32}) and the 53-bit uniforms u0 = (r0·2^21 + r1 / 2^11)·2^-53, u1 = (r2·2^21 + r3 / 2^11)·2^-53.
//   uniform(lo, hi): fma(hi - lo, u0, lo)
//   normal(mean, std): fma(std·√(-2·ln(1 - u0)), cos(2π·u1), mean)   (Box-Muller's cosine branch)
//   bits64: r0·2^32 + r1   (randint reduces it modulo its range)
// ln is fdlibm's e_log.c scheme (reduction to [√½, √2), a degree-14 series in s = f / (2 + f)), cos(2π·u)
// a quadrant reduction of u itself (exact) and Taylor polynomials of sin and cos on |2π·f| <= π/4; each
// within about one double ulp of the exact value, so a float32 draw is the correctly rounded value except
// where the exact one lies within ~1e-16 of a rounding boundary.
//
// Why by hand: libm's scalar log / cos cost ~40 ns an element (randn of 1M floats took 48 ms against
// PyTorch's 5); glibc's vector libmvec gives other results on AVX2 and AVX-512 machines and no library
// ships a vector Philox. Here every operation is an IEEE one (the files build with -ffp-contract=off; the
// fused multiply-adds are explicit), so the AVX2 and AVX-512 copies give the same bits, which
// random_kernels_test checks.
//
// Invariant: as core/ops/attention_kernels.inc, the .inc has internal linkage only and calls no inline code
// of other headers (an AVX-512 copy of a shared inline function could otherwise be linked into AVX2 code).
//
// Example:
//   const RandomKernels& k = ActiveRandomKernels();
//   double v[100];
//   k.normal(/*seed=*/42, /*c0=*/0, 100, 0.0, 1.0, v);   // the values Randn({100}, Generator(42)) holds
#pragma once

#include <cstdint>

namespace tessel {

struct RandomKernels {
  const char* name;  // "avx2" or "avx512"
  // out[i] for counters c0 .. c0 + n - 1 (n >= 0), as the file comment defines them.
  void (*uniform)(uint64_t seed, uint64_t c0, int64_t n, double lo, double hi, double* out);
  void (*normal)(uint64_t seed, uint64_t c0, int64_t n, double mean, double std, double* out);
  void (*bits64)(uint64_t seed, uint64_t c0, int64_t n, uint64_t* out);
};

// The copy ActiveVectorIsa() names (core/ops/vector_isa.h).
const RandomKernels& ActiveRandomKernels();
const RandomKernels& Avx2RandomKernels();
const RandomKernels& Avx512RandomKernels();  // only on a CPU where CpuHasAvx512()

}  // namespace tessel
