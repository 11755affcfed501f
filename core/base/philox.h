// core/base/philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), the one counter-based generator behind every random number tessel draws: host code
// (core/tensor/random.cc's Philox4x32, core/ops/dropout.cc) and CUDA kernels (core/ops/dropout.cu)
// include this same function, so a mask drawn on the GPU equals the CPU's bit for bit.
//
// Why by hand: it is ten rounds of two 32x32->64 multiplies; the libraries that ship it (cuRAND,
// Random123, oneMKL) are either device-only or not Debian packages we can put into both compilers.
//
// Invariant: PhiloxRounds is a pure function of (counter, key), valid C++20 for g++ and for nvcc
// (host and device); core/tensor/random_test.cc checks the published known-answer vectors.
//
// Example:
//   const PhiloxBlock r = PhiloxRounds({c0, c1, c2, c3}, {k0, k1});   // r.w[0..3]
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TESSEL_PHILOX_HOST_DEVICE __host__ __device__
#else
#define TESSEL_PHILOX_HOST_DEVICE
#endif

namespace tessel {

struct PhiloxBlock {
  uint32_t w[4];
};

TESSEL_PHILOX_HOST_DEVICE inline PhiloxBlock PhiloxRounds(PhiloxBlock c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.w[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c.w[2];
    c = PhiloxBlock{{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ k0, static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ k1, static_cast<uint32_t>(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

}  // namespace tessel
