// core/tensor/random.cc — Philox4x32-10 and block-exact random fills.
#include "core/tensor/random.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/base/philox.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/mt19937.h"
#include "core/tensor/random_kernels.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

// [Note: Generator thread ownership] Threads get ids 1, 2, ... on first use; the ids of running threads
// are kept in a set (a thread_local's destructor removes its id at thread exit), consulted only when a
// generator changes hands.
std::mutex g_live_mu;
std::set<uint64_t>& LiveThreads() {
  static auto* live = new std::set<uint64_t>();  // never destroyed: threads may exit after static teardown
  return *live;
}
struct ThreadIdentity {
  uint64_t id;
  ThreadIdentity() {
    static std::atomic<uint64_t> next{1};
    id = next.fetch_add(1);
    std::lock_guard<std::mutex> lock(g_live_mu);
    LiveThreads().insert(id);
  }
  ~ThreadIdentity() {
    std::lock_guard<std::mutex> lock(g_live_mu);
    LiveThreads().erase(id);
  }
};
uint64_t ThisThreadId() {
  thread_local ThreadIdentity identity;
  return identity.id;
}
bool ThreadIsLive(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  return LiveThreads().count(id) > 0;
}

// Up to kChunk values of one run at a time pass through a stack buffer of doubles (or 64-bit words).
constexpr int64_t kChunk = 512;

// dst[i] = the value of v[i] in T. A uniform draw's rounding may reach its (exclusive) upper bound as T holds it
// (a float32 or bfloat16 draw of U[0, 1) rounds 1 - 2^-25 or 1 - 2^-9 up to 1; U[0, 0.7) in bfloat16 reaches
// bfloat16(0.7) = 0.69921875): such a value becomes the largest one of T below that bound instead (torch compares
// in the dtype and never returns it either).
template <typename T>
void StoreFloats(const double* v, int64_t n, T* dst, const Distribution& dist) {
  const bool half_open = dist.kind == Distribution::Kind::kUniform && dist.b > dist.a;
  const T bound = FromCompute<T>(dist.b);
  T below = bound;  // the largest T under `bound`
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    below = std::nextafter(bound, -std::numeric_limits<T>::infinity());
  } else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
    const bool negative = (bound.bits & 0x8000u) != 0;  // toward -inf in sign-magnitude bits (+0 to -min)
    below.bits = static_cast<uint16_t>(negative ? bound.bits + 1 : (bound.bits == 0 ? 0x8001u : bound.bits - 1));
  }
  for (int64_t i = 0; i < n; ++i) {
    T x = FromCompute<T>(v[i]);
    if constexpr (!std::is_integral_v<T>) {
      if (half_open && ToCompute(x) >= ToCompute(bound)) x = below;
    }
    dst[i] = x;
  }
}

// The values an integer T holds, as int64 (every int64 for the other types: randint into a float or bool
// dtype converts as before).
template <typename T>
std::pair<int64_t, int64_t> IntegerRange() {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, int64_t>) {
    return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
  } else {
    return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

// Truncated normal (Distribution::TruncatedNormal): v[j] (counter c + j) replaced, where outside the bounds, by
// the first of the normal values at counters c + j + r·round_stride (r = 1, 2, ...) inside them.
void Truncate(const RandomKernels& k, uint64_t seed, uint64_t c, int64_t n, uint64_t round_stride,
              const Distribution& dist, double* v) {
  for (int64_t j = 0; j < n; ++j) {
    for (uint64_t r = 1; r < kTruncatedRounds && !(v[j] >= dist.lower && v[j] <= dist.upper); ++r) {
      k.normal(seed, c + static_cast<uint64_t>(j) + r * round_stride, 1, dist.a, dist.b, v + j);
    }
    v[j] = std::clamp(v[j], dist.lower, dist.upper);  // (all rounds missed: a chance under 1e-19)
  }
}

// dst[0, n) = the values of counters [c, c + n) (dst contiguous, of type T); round_stride: the full tensor's
// numel (a truncated normal's redraws are that far apart).
template <typename T>
void FillRun(const RandomKernels& k, uint64_t seed, uint64_t c, int64_t n, uint64_t round_stride,
             const Distribution& dist, T* dst) {
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    const uint64_t ci = c + static_cast<uint64_t>(i);
    if (dist.kind == Distribution::Kind::kInteger) {
      uint64_t words[kChunk];
      k.bits64(seed, ci, m, words);
      // Exact in int64 for any range (through a double, a range past 2^53 lost its low bits).
      const uint64_t range = static_cast<uint64_t>(dist.high) - static_cast<uint64_t>(dist.low);
      for (int64_t j = 0; j < m; ++j) {
        const auto v = static_cast<int64_t>(static_cast<uint64_t>(dist.low) + words[j] % range);
        if constexpr (std::is_same_v<T, int64_t>) {
          dst[i + j] = v;
        } else {
          dst[i + j] = FromCompute<T>(static_cast<double>(v));
        }
      }
      continue;
    }
    double v[kChunk];
    (dist.kind == Distribution::Kind::kUniform ? k.uniform : k.normal)(seed, ci, m, dist.a, dist.b, v);
    if (dist.kind == Distribution::Kind::kTruncatedNormal) Truncate(k, seed, ci, m, round_stride, dist, v);
    StoreFloats(v, m, dst + i, dist);  // (float64 too: lo + span·u may round to hi)
  }
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const PhiloxBlock r = PhiloxRounds(PhiloxBlock{{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
}

void CheckDraw(const Distribution& dist, DType dtype) {
  if (dist.kind == Distribution::Kind::kTruncatedNormal) {
    TESSEL_CHECK(dist.lower < dist.upper && dist.b > 0, "trunc_normal: bounds [", dist.lower, ", ", dist.upper,
                 "] with std ", dist.b, ": need lower < upper and std > 0");
  }
  if (dist.kind == Distribution::Kind::kInteger) {
    TESSEL_CHECK(dist.high > dist.low, "randint: empty range [", dist.low, ", ", dist.high, ")");
    // torch's bounds check for an integer dtype: both ends of [low, high - 1] must be values of it.
    int64_t lo = 0, hi = 0;
    TESSEL_DISPATCH_ALL_TYPES(dtype, "randint", [&] { std::tie(lo, hi) = IntegerRange<scalar_t>(); });
    TESSEL_CHECK(dist.low >= lo, "randint: from is out of bounds for ", dtype, " (from ", dist.low, ", range [",
                 lo, ", ", hi, "])");
    TESSEL_CHECK(dist.high - 1 <= hi, "randint: to - 1 is out of bounds for ", dtype, " (to ", dist.high,
                 ", range [", lo, ", ", hi, "])");
  }
}

void FillRandomBlock(const Tensor& out, std::span<const int64_t> full_shape, std::span<const int64_t> block_offsets,
                     uint64_t seed, uint64_t base_offset, Distribution dist) {
  const int64_t nd = static_cast<int64_t>(full_shape.size());
  TESSEL_CHECK(out.dim() == nd && static_cast<int64_t>(block_offsets.size()) == nd, "random block: block of shape ",
               ShapeStr(out.sizes()), " at ", ShapeStr(block_offsets), " does not match full shape ",
               ShapeStr(full_shape));
  for (int64_t d = 0; d < nd; ++d) {
    TESSEL_CHECK(block_offsets[d] >= 0 && block_offsets[d] + out.size(d) <= full_shape[d], "random block: block ",
                 ShapeStr(out.sizes()), " at ", ShapeStr(block_offsets), " exceeds full shape ", ShapeStr(full_shape));
  }
  CheckDraw(dist, out.dtype());
  const int64_t n = out.numel();
  if (n == 0) return;
  // Sampled on the host (same values on every device) into `dst`: `out` itself when it is a dense host tensor,
  // else a dense host copy that CopyInto moves into it.
  const bool direct = out.device().is_cpu() && out.is_contiguous();
  Tensor dst = direct ? out : Empty(out.sizes(), out.dtype(), Device::Cpu(0));
  const Shape& sizes = out.sizes();
  const Shape full_strides = ContiguousStrides(full_shape);
  uint64_t full_numel = 1;
  for (int64_t d : full_shape) full_numel *= static_cast<uint64_t>(d);
  // Runs of consecutive counters: the block's trailing dims that span the whole full tensor continue the
  // run of the dim before them, so a run covers dims [j, nd).
  int64_t j = nd == 0 ? 0 : nd - 1;
  while (j > 0 && sizes[j] == full_shape[j]) --j;
  int64_t run = 1;
  for (int64_t d = j; d < nd; ++d) run *= sizes[d];
  int64_t origin = 0;  // the block's first element, as a linear index of the full tensor
  for (int64_t d = 0; d < nd; ++d) origin += block_offsets[d] * full_strides[d];
  // The counter of run r (r in row-major order over the block's dims [0, j)).
  auto run_start = [&](int64_t r) {
    int64_t at = origin;
    for (int64_t d = j - 1; d >= 0; --d) {
      at += (r % sizes[d]) * full_strides[d];
      r /= sizes[d];
    }
    return base_offset + static_cast<uint64_t>(at);
  };
  const RandomKernels& kernels = ActiveRandomKernels();
  TESSEL_DISPATCH_ALL_TYPES(dst.dtype(), "random", [&] {
    scalar_t* p = dst.data_ptr<scalar_t>();
    ParallelFor(0, n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e;) {
        const int64_t r = i / run, within = i % run, len = std::min(run - within, e - i);
        FillRun(kernels, seed, run_start(r) + static_cast<uint64_t>(within), len, full_numel, dist, p + i);
        i += len;
      }
    });
  });
  if (direct) {
    out.impl()->storage().BumpVersion();  // as CopyInto does for the other path
  } else {
    CopyInto(out, dst);
  }
}

Tensor RandomBlock(std::span<const int64_t> full_shape, std::span<const int64_t> block_offsets,
                   std::span<const int64_t> block_shape, uint64_t seed, uint64_t base_offset, Distribution dist,
                   DType dtype) {
  Tensor out = Empty(block_shape, dtype);
  FillRandomBlock(out, full_shape, block_offsets, seed, base_offset, dist);
  return out;
}

void Generator::CheckThread() {
  const uint64_t me = ThisThreadId();
  uint64_t owner = owner_.load(std::memory_order_acquire);
  while (owner != me) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, owner == 0 || !ThreadIsLive(owner), "Generator(seed=", seed_,
                      ") is used from two threads at once (it belongs to a thread that is still running): ranks ",
                      "sharing one generator race on its offset and start from different values. HINT: give each ",
                      "rank (thread) its own Generator with the same seed, e.g. `Generator gen(seed);` inside the ",
                      "rank function");
    if (owner_.compare_exchange_weak(owner, me, std::memory_order_acq_rel)) return;
  }
}

void Generator::HostDraw(std::span<uint32_t> out) {
  CheckThread();
  struct Engine {
    bool valid = false;
    uint32_t seed = 0;
    uint64_t count = 0;  // words drawn from `engine` since its seed
    Mt19937 engine;  // (std::mt19937's words, vectorized)
  };
  thread_local Engine last;
  const auto seed32 = static_cast<uint32_t>(seed_);  // torch's mt19937 takes the seed's low 32 bits
  if (!last.valid || last.seed != seed32 || last.count != host_draws_) {
    last.engine = Mt19937(seed32);  // (init_genrand, as torch's)
    last.engine.Discard(host_draws_);
    last.valid = true;
    last.seed = seed32;
  }
  last.engine.Fill(out);
  host_draws_ += out.size();
  last.count = host_draws_;
}

void FillRandom(const Tensor& out, Generator& gen, Distribution dist) {
  CheckDraw(dist, out.dtype());  // before the generator moves
  if (DeferredInitEnabled()) return;  // [Note: deferred init] in factory.h: no draw
  const uint64_t base = gen.Advance(CountersFor(dist, static_cast<uint64_t>(out.numel())));
  FillRandomBlock(out, out.sizes(), Shape(out.sizes().size(), 0), gen.seed(), base, dist);
}

Tensor Random(std::span<const int64_t> shape, Generator& gen, Distribution dist, DType dtype) {
  Tensor out = Empty(shape, dtype);
  FillRandom(out, gen, dist);
  ResetVersionIfUnshared(out);  // torch's factories return version 0
  return out;
}

Tensor Rand(std::span<const int64_t> shape, Generator& gen, DType dtype) {
  return Random(shape, gen, Distribution::Uniform(), dtype);
}
Tensor Randn(std::span<const int64_t> shape, Generator& gen, DType dtype) {
  return Random(shape, gen, Distribution::Normal(), dtype);
}
Tensor Randint(int64_t low, int64_t high, std::span<const int64_t> shape, Generator& gen, DType dtype) {
  return Random(shape, gen, Distribution::Integer(low, high), dtype);
}

}  // namespace tessel
