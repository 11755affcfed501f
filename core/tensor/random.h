// core/tensor/random.h — counter-based random numbers (Philox4x32-10) with block-exact generation.
//
// Invariant (what DTensor's sharded init relies on): element i (row-major linear index in the *full*
// tensor) of a random tensor drawn at generator offset `base` depends only on (seed, base + i) (a truncated
// normal: on (seed, base + k·numel + i) for k < kTruncatedRounds). So
// generating any sub-block alone (FillRandomBlock) gives exactly the values of that block in the full
// tensor, on any rank, in any order. Each Rand/Randn/Randint call advances the generator by numel.
//
// Example:
//   Generator gen(42);
//   Tensor w = Randn({8, 8}, gen);                        // uses counters [0, 64)
//   Generator g2(42);
//   Tensor rows = RandomBlock({8, 8}, {2, 0}, {3, 8}, g2.seed(), 0, Distribution::Normal());
//   // rows == rows 2..4 of w, bit for bit
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>

#include "core/tensor/tensor.h"

namespace tessel {

// One Philox4x32-10 block: 4 random 32-bit words for (counter, key).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A seed plus a counter offset. A plain value: pass it by reference to whatever draws from it.
//
// One thread at a time: the first thread that draws owns the generator; a draw from another thread
// while the owner still runs raises kFailedPrecondition (rank threads sharing one generator would race
// on the offset and start their replicas from different weights, silently). Ownership passes to a new
// thread once the owner has exited; a copy is unowned, so "one copy per rank, same seed" is the fix.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  Generator(const Generator& other)
      : seed_(other.seed_), offset_(other.offset_), host_draws_(other.host_draws_), next_normal_(other.next_normal_) {}
  Generator& operator=(const Generator& other) {
    seed_ = other.seed_;
    offset_ = other.offset_;
    host_draws_ = other.host_draws_;
    next_normal_ = other.next_normal_;
    owner_.store(0, std::memory_order_relaxed);
    return *this;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) {
    CheckThread();
    offset_ = offset;
  }
  // Reserves n counters and returns the first.
  uint64_t Advance(uint64_t n) {
    CheckThread();
    const uint64_t base = offset_;
    offset_ += n;
    return base;
  }
  friend bool operator==(const Generator& a, const Generator& b) {
    return a.seed_ == b.seed_ && a.offset_ == b.offset_ && a.host_draws_ == b.host_draws_ &&
           a.next_normal_ == b.next_normal_;
  }

  // The host stream, for what torch draws on the CPU from its MT19937 one 32-bit word at a time (randperm, a
  // sampler's seed, randint for a sampler): 32-bit words of MT19937 seeded with the low 32 bits of the seed, as
  // torch's CPU generator is, so a generator seeded as in a torch script and used only for these draws gives
  // torch's permutations and seeds. Tensor draws (Philox) do not move it, nor it them. The generator keeps
  // the count of words drawn, not the 2.5 KB engine, so it stays a plain value: a draw continues the engine
  // of this thread's last host draw when that is where this one starts, else rebuilds it and skips the count.
  uint64_t host_draws() const { return host_draws_; }
  void set_host_draws(uint64_t n) {
    CheckThread();
    host_draws_ = n;
  }
  void HostDraw(std::span<uint32_t> out);
  // The second value of the last Box-Muller pair an element-at-a-time normal draw made (torch's CPU generator
  // keeps it for the next such draw: torch_random.h); seeding clears it.
  std::optional<double> next_normal() const { return next_normal_; }
  void set_next_normal(std::optional<double> v) {
    CheckThread();
    next_normal_ = v;
  }

 private:
  // Fast path: the caller already owns it (one relaxed load and a thread_local read).
  void CheckThread();

  uint64_t seed_;
  uint64_t offset_;
  uint64_t host_draws_ = 0;  // 32-bit words drawn from the host stream since the seed
  std::optional<double> next_normal_;
  std::atomic<uint64_t> owner_{0};  // id of the owning thread (0: none); see CheckThread
};

struct Distribution {
  enum class Kind { kUniform, kNormal, kInteger, kTruncatedNormal } kind = Kind::kUniform;
  double a = 0;  // uniform: low (inclusive); normal, truncated normal: mean
  double b = 1;  // uniform: high (exclusive); normal, truncated normal: std
  int64_t low = 0, high = 0;  // integer: [low, high), exact (a double would round a range past 2^53)
  double lower = 0, upper = 0;  // truncated normal: the bounds [lower, upper]
  static Distribution Uniform(double low = 0, double high = 1) { return {Kind::kUniform, low, high}; }
  static Distribution Normal(double mean = 0, double std = 1) { return {Kind::kNormal, mean, std}; }
  static Distribution Integer(int64_t low, int64_t high) {
    return {Kind::kInteger, static_cast<double>(low), static_cast<double>(high), low, high};
  }
  // N(mean, std²) restricted to [lower, upper], block exact: element i of a draw over N elements at `base` is
  // the first of the normal values at counters base + k·N + i (k < kTruncatedRounds) inside the bounds (torch
  // 2.15's trunc_normal_ redraws every rejected element from a fresh whole-tensor draw until none is left; here
  // the k-th redraw of an element is fixed by its counter, so any block of the tensor is drawn alone). The last
  // candidate, clamped, where all kTruncatedRounds miss: for bounds holding > 0.3 of the mass (torch's rule for
  // this method) a chance under 0.7^128 = 1.5e-20 per element. A draw reserves kTruncatedRounds·N counters.
  static Distribution TruncatedNormal(double mean, double std, double lower, double upper) {
    return {Kind::kTruncatedNormal, mean, std, 0, 0, lower, upper};
  }
};
inline constexpr uint64_t kTruncatedRounds = 128;
// Counters a draw of n elements of `dist` reserves (what it advances a generator by).
inline uint64_t CountersFor(const Distribution& dist, uint64_t n) {
  return dist.kind == Distribution::Kind::kTruncatedNormal ? kTruncatedRounds * n : n;
}

Tensor Rand(std::span<const int64_t> shape, Generator& gen, DType dtype = DType::kFloat32);
Tensor Randn(std::span<const int64_t> shape, Generator& gen, DType dtype = DType::kFloat32);
Tensor Randint(int64_t low, int64_t high, std::span<const int64_t> shape, Generator& gen,
               DType dtype = DType::kInt64);
inline Tensor Rand(std::initializer_list<int64_t> s, Generator& g, DType d = DType::kFloat32) {
  return Rand(std::span<const int64_t>(s.begin(), s.size()), g, d);
}
inline Tensor Randn(std::initializer_list<int64_t> s, Generator& g, DType d = DType::kFloat32) {
  return Randn(std::span<const int64_t>(s.begin(), s.size()), g, d);
}
// kInvalidArgument unless `dist` can be drawn into `dtype` (randint's bounds fit it, a truncated normal's bounds
// are ordered). Random and FillRandomBlock check it; callers that advance a generator first call it before.
void CheckDraw(const Distribution& dist, DType dtype);
// A fresh draw of `dist` for out's shape written into `out` (dense, any strides), advancing gen as the draw does;
// under deferred (meta) init nothing is drawn and gen stays. Not recorded by autograd.
void FillRandom(const Tensor& out, Generator& gen, Distribution dist);
// Draws a full tensor of `shape` from `dist` at the generator's offset, advancing it by numel.
Tensor Random(std::span<const int64_t> shape, Generator& gen, Distribution dist, DType dtype);
// Fills `out` (dense, any strides, any device) with the block of a `full_shape` random tensor that starts at
// `block_offsets`, as drawn with (seed, base_offset), converted to out's dtype (a uniform draw stays below its
// upper bound in that dtype). Does not advance any generator; bumps out's version, as CopyInto.
void FillRandomBlock(const Tensor& out, std::span<const int64_t> full_shape, std::span<const int64_t> block_offsets,
                     uint64_t seed, uint64_t base_offset, Distribution dist);
Tensor RandomBlock(std::span<const int64_t> full_shape, std::span<const int64_t> block_offsets,
                   std::span<const int64_t> block_shape, uint64_t seed, uint64_t base_offset, Distribution dist,
                   DType dtype = DType::kFloat32);

}  // namespace tessel
