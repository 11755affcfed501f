// core/tensor/random.cc — Philox4x32-10 and block-exact random fills.
#include "core/tensor/random.h"

#include <cmath>
#include <mutex>
#include <set>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/base/philox.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/strided_loop.h"
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

// Value of the element whose global counter is `c` (seed is the key). Computed in double.
double Sample(uint64_t seed, uint64_t c, const Distribution& dist) {
  const auto r = Philox4x32({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u},
                            {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  // 53-bit uniforms in [0, 1).
  const double u0 = static_cast<double>((static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11)) * 0x1.0p-53;
  switch (dist.kind) {
    case Distribution::Kind::kUniform:
      return dist.a + (dist.b - dist.a) * u0;
    case Distribution::Kind::kNormal: {
      const double u1 = static_cast<double>((static_cast<uint64_t>(r[2]) << 21) ^ (r[3] >> 11)) * 0x1.0p-53;
      const double radius = std::sqrt(-2.0 * std::log(1.0 - u0));  // 1 - u0 in (0, 1]
      return dist.a + dist.b * radius * std::cos(2.0 * M_PI * u1);
    }
    case Distribution::Kind::kInteger: {
      const uint64_t range = static_cast<uint64_t>(dist.b - dist.a);
      const uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
      return dist.a + static_cast<double>(x % range);
    }
  }
  return 0;
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const PhiloxBlock r = PhiloxRounds(PhiloxBlock{{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
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
  if (dist.kind == Distribution::Kind::kInteger) {
    TESSEL_CHECK(dist.b > dist.a, "randint: empty range [", dist.a, ", ", dist.b, ")");
  }
  // Sampled on the host (same values on every device); CopyInto below moves them to a CUDA `out`.
  Tensor tmp = Empty(out.sizes(), DType::kFloat64, out.device().is_cpu() ? out.device() : Device::Cpu(0));
  double* p = tmp.data_ptr<double>();
  const Shape full_strides = ContiguousStrides(full_shape);
  int64_t base = 0;
  for (int64_t d = 0; d < nd; ++d) base += block_offsets[d] * full_strides[d];
  const Shape& sizes = out.sizes();
  const Shape tmp_strides = ContiguousStrides(sizes);
  ParallelFor(0, tmp.numel(), 1 << 12, [&](int64_t b, int64_t e) {
    ForEachStrided<2>(sizes, {std::span<const int64_t>(tmp_strides), std::span<const int64_t>(full_strides)},
                      [&](const int64_t* off) {
                        p[off[0]] = Sample(seed, base_offset + static_cast<uint64_t>(base + off[1]), dist);
                      },
                      b, e);
  });
  CopyInto(out, tmp);
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

Tensor Random(std::span<const int64_t> shape, Generator& gen, Distribution dist, DType dtype) {
  Tensor out = Empty(shape, dtype);
  if (DeferredInitEnabled()) return out;  // [Note: deferred init] in factory.h: no draw
  const Shape zeros(shape.size(), 0);
  FillRandomBlock(out, shape, zeros, gen.seed(), gen.Advance(out.numel()), dist);
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
