// core/tensor/mt19937.h — MT19937 (Matsumoto and Nishimura's 32-bit Mersenne Twister) with the twist and the
// tempering in AVX2 vectors: the words std::mt19937 gives for the same seed, ~12x faster (0.47 against 5.8 ns a
// word on an Emerald Rapids Xeon, one thread).
//
// Why by hand: the host stream (random.h) is torch's CPU generator, MT19937 seeded by init_genrand, and a CPU draw
// of n floats reads n words; libstdc++'s std::mt19937 takes ~5 ns a word here (more than aten's whole uniform_),
// and no Debian library ships a vectorized MT19937 with this seeding (SFMT and dSFMT are other generators).
// The twist's recurrence reads words 1 and 397 ahead, so 8 consecutive words update at once wherever neither
// read crosses a word of the same 8 (random_test checks the words against std::mt19937's).
//
// Example:
//   Mt19937 e(5);
//   uint32_t w[100];
//   e.Fill(w);             // std::mt19937(5)'s first 100 outputs
//   e.Discard(1000000);
#pragma once

#include <cstdint>
#include <span>

namespace tessel {

class Mt19937 {
 public:
  static constexpr int kN = 624;
  explicit Mt19937(uint32_t seed = 5489u);
  void Fill(std::span<uint32_t> out);
  void Discard(uint64_t n);

 private:
  void Twist();
  uint32_t mt_[kN];
  int next_ = kN;  // index of the next state word to temper
};

}  // namespace tessel
