// core/tensor/mt19937.cc — the vectorized MT19937 (mt19937.h).
#include "core/tensor/mt19937.h"

#include <immintrin.h>

#include <algorithm>

namespace tessel {
namespace {

constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
constexpr int kM = 397;

inline uint32_t TwistOne(uint32_t cur, uint32_t next, uint32_t far) {
  const uint32_t y = (cur & kUpper) | (next & kLower);
  return far ^ (y >> 1) ^ ((0u - (y & 1u)) & kMatrix);
}

// mt[i .. i + 8) from mt[i .. i + 9) and mt[far .. far + 8).
inline void TwistEight(uint32_t* mt, int i, int far) {
  const __m256i cur = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mt + i));
  const __m256i next = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mt + i + 1));
  const __m256i f = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mt + far));
  const __m256i y = _mm256_or_si256(_mm256_and_si256(cur, _mm256_set1_epi32(static_cast<int>(kUpper))),
                                    _mm256_and_si256(next, _mm256_set1_epi32(static_cast<int>(kLower))));
  const __m256i odd = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(y, _mm256_set1_epi32(1)));
  const __m256i v = _mm256_xor_si256(_mm256_xor_si256(f, _mm256_srli_epi32(y, 1)),
                                     _mm256_and_si256(odd, _mm256_set1_epi32(static_cast<int>(kMatrix))));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(mt + i), v);
}

inline __m256i Temper(__m256i y) {
  y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 11));
  y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 7), _mm256_set1_epi32(static_cast<int>(0x9d2c5680u))));
  y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 15), _mm256_set1_epi32(static_cast<int>(0xefc60000u))));
  return _mm256_xor_si256(y, _mm256_srli_epi32(y, 18));
}

inline uint32_t Temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

}  // namespace

Mt19937::Mt19937(uint32_t seed) {
  mt_[0] = seed;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
}

void Mt19937::Twist() {
  // Words [0, 227) read words 397 ahead, still old; [227, 624) read words 227 behind, already new. In eights
  // while word i + 8 (the last "next" read) is still old and the far reads lie outside the eight.
  int i = 0;
  for (; i + 8 <= kN - kM; i += 8) TwistEight(mt_, i, i + kM);          // [0, 224)
  for (; i < kN - kM; ++i) mt_[i] = TwistOne(mt_[i], mt_[i + 1], mt_[i + kM]);  // [224, 227)
  for (; i + 8 < kN; i += 8) TwistEight(mt_, i, i + kM - kN);            // [227, 619)
  for (; i < kN - 1; ++i) mt_[i] = TwistOne(mt_[i], mt_[i + 1], mt_[i + kM - kN]);
  mt_[kN - 1] = TwistOne(mt_[kN - 1], mt_[0], mt_[kM - 1]);
  next_ = 0;
}

void Mt19937::Fill(std::span<uint32_t> out) {
  size_t o = 0;
  while (o < out.size()) {
    if (next_ == kN) Twist();
    const size_t take = std::min<size_t>(out.size() - o, static_cast<size_t>(kN - next_));
    size_t k = 0;
    for (; k + 8 <= take; k += 8) {
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mt_ + next_ + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.data() + o + k), Temper(y));
    }
    for (; k < take; ++k) out[o + k] = Temper(mt_[next_ + k]);
    next_ += static_cast<int>(take);
    o += take;
  }
}

void Mt19937::Discard(uint64_t n) {
  const auto in_block = std::min<uint64_t>(n, static_cast<uint64_t>(kN - next_));
  next_ += static_cast<int>(in_block);
  n -= in_block;
  while (n > 0) {
    Twist();
    const auto step = std::min<uint64_t>(n, kN);
    next_ = static_cast<int>(step);
    n -= step;
  }
}

}  // namespace tessel
