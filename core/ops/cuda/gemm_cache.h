// core/ops/cuda/gemm_cache.h — the key and the bounded LRU cache behind core/ops/matmul_cuda.cc's
// cuBLASLt plans: a product's matmul descriptor, its three matrix layouts and the heuristic's algorithm
// are built once per (device, stream, dtype, epilogue, planned shape) and reused by every later call with
// that key. Plain C++ (the cached entry is a template parameter), so the key and hit/miss/eviction logic
// are tested on the host (gemm_cache_test.cc).
//
// Invariant: two calls share an entry iff every field of GemmKey is equal: everything that goes into a
// descriptor, a layout or the heuristic's choice (operand ops, sizes, leading dims, batch count and
// strides, dtype, epilogue, device) plus the stream (an entry's descriptor is mutated per call, for the
// bias pointer, under the entry's own lock). Per-call pointers (operands, output, bias, workspace) are
// never part of the key. At most `capacity` entries live; inserting past it evicts the least recently
// used one (destroying its cuBLASLt objects). Thread-safe.
//
// Example:
//   GemmPlanCache<LtEntry> cache(/*capacity=*/256);
//   GemmKey key = GemmKey::Of(plan, device_index, stream, dtype_code, GemmEpilogue::kBias, PointerAlignment({a, b, d}));
//   std::shared_ptr<LtEntry> e = cache.FindOrCreate(key, [&] { return BuildEntry(key); });
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <list>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/ops/cuda/gemm_plan.h"

namespace tessel::cuda {

enum class GemmEpilogue : uint8_t { kNone, kBias };

struct GemmKey {
  LtPlan plan;
  int device = 0;
  const void* stream = nullptr;
  int dtype = 0;  // the caller's dtype code (DType as int)
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  int alignment = 256;  // PointerAlignment over every operand pointer (the heuristic's alignment promise)

  static GemmKey Of(const LtPlan& plan, int device, const void* stream, int dtype, GemmEpilogue epilogue,
                    int alignment) {
    return GemmKey{plan, device, stream, dtype, epilogue, alignment};
  }
  auto Tie() const {
    return std::tie(plan.a.trans, plan.a.rows, plan.a.cols, plan.a.ld, plan.b.trans, plan.b.rows, plan.b.cols,
                    plan.b.ld, plan.m, plan.n, plan.k, plan.batch, plan.stride_a, plan.stride_b, plan.stride_c, device,
                    stream, dtype, epilogue, alignment);
  }
  bool operator==(const GemmKey& o) const { return Tie() == o.Tie(); }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    const LtPlan& p = k.plan;
    for (int64_t v : {p.a.rows, p.a.cols, p.a.ld, p.b.rows, p.b.cols, p.b.ld, p.m, p.n, p.k, p.batch, p.stride_a,
                      p.stride_b, p.stride_c}) {
      mix(static_cast<uint64_t>(v));
    }
    mix((uint64_t{p.a.trans} << 1) | uint64_t{p.b.trans});
    mix(static_cast<uint64_t>(k.device));
    mix(reinterpret_cast<uintptr_t>(k.stream));
    mix((static_cast<uint64_t>(k.dtype) << 8) | static_cast<uint64_t>(k.epilogue));
    mix(static_cast<uint64_t>(k.alignment));
    return h;
  }
};

// The largest power of two (at most 256) dividing every non-null pointer's address: what cuBLASLt may
// assume about the operands (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), so views at odd offsets get an
// algorithm that accepts them and a separate cache entry.
inline int PointerAlignment(std::initializer_list<const void*> pointers) {
  int align = 256;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  }
  return align;
}

struct GemmCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;  // entries built
  int64_t evictions = 0;
  int64_t size = 0;
};

template <typename Entry>
class GemmPlanCache {
 public:
  explicit GemmPlanCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The entry for `key`, built by `make` (returning std::shared_ptr<Entry>) on a miss. A caller may keep
  // using a returned entry after it was evicted: it dies with the last reference.
  template <typename Make>
  std::shared_ptr<Entry> FindOrCreate(const GemmKey& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
      return it->second->second;
    }
    ++stats_.misses;
    std::shared_ptr<Entry> entry = make();
    lru_.emplace_front(key, entry);
    index_[key] = lru_.begin();
    if (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
      ++stats_.evictions;
    }
    return entry;
  }

  GemmCacheStats Stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    GemmCacheStats s = stats_;
    s.size = static_cast<int64_t>(lru_.size());
    return s;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    lru_.clear();
  }

 private:
  using Item = std::pair<GemmKey, std::shared_ptr<Entry>>;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Item> lru_;
  std::unordered_map<GemmKey, typename std::list<Item>::iterator, GemmKeyHash> index_;
  GemmCacheStats stats_;
};

// The process's cuBLASLt plan cache counters (defined in core/ops/matmul_cuda.cc: CUDA builds only).
GemmCacheStats LtPlanCacheStats();

}  // namespace tessel::cuda
