// core/ops/cuda/gemm_cache_test.cc — the cuBLASLt plan cache's key and bookkeeping (cuda/gemm_cache.h),
// on the host: every key field separates entries and per-call pointers do not; over three steps of a
// GPT-like sequence of products (forward with the bias epilogue, dgrad, wgrad, the head without bias)
// only the first step builds entries (exact hit/miss counts), a second stream builds its own set; the
// LRU bound evicts the least recently used entry while a caller still holding it keeps it alive;
// PointerAlignment is the largest power of two (<= 256) dividing every operand address.
#include "core/ops/cuda/gemm_cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

namespace tessel::cuda {
namespace {

struct Entry {
  static inline int alive = 0;
  int id;
  explicit Entry(int i) : id(i) { ++alive; }
  ~Entry() { --alive; }
};

// A cache lookup that builds a numbered entry on a miss.
std::shared_ptr<Entry> Get(GemmPlanCache<Entry>& cache, const GemmKey& key, int* built) {
  return cache.FindOrCreate(key, [&] { return std::make_shared<Entry>((*built)++); });
}

LtPlan Plan(std::vector<int64_t> as, std::vector<int64_t> ast, std::vector<int64_t> bs, std::vector<int64_t> bst,
            bool sum_batch = false) {
  const std::optional<LtPlan> p = PlanMatmul(as, ast, bs, bst, sum_batch);
  EXPECT_TRUE(p.has_value());
  return *p;
}

const void* const kStream0 = reinterpret_cast<const void*>(0x1000);
const void* const kStream1 = reinterpret_cast<const void*>(0x2000);

GemmKey Key(const LtPlan& p, const void* stream = kStream0, GemmEpilogue epi = GemmEpilogue::kNone) {
  return GemmKey::Of(p, /*device=*/0, stream, /*dtype=*/1, epi, /*alignment=*/256);
}

TEST(GemmCacheTest, EveryKeyFieldSeparatesEntries) {
  const LtPlan base = Plan({6, 8}, {8, 1}, {8, 4}, {4, 1});
  std::vector<std::function<void(GemmKey&)>> changes = {
      [](GemmKey& k) { k.plan.a.trans = !k.plan.a.trans; }, [](GemmKey& k) { k.plan.b.trans = !k.plan.b.trans; },
      [](GemmKey& k) { k.plan.a.rows += 1; },               [](GemmKey& k) { k.plan.a.cols += 1; },
      [](GemmKey& k) { k.plan.a.ld += 1; },                 [](GemmKey& k) { k.plan.b.rows += 1; },
      [](GemmKey& k) { k.plan.b.cols += 1; },               [](GemmKey& k) { k.plan.b.ld += 1; },
      [](GemmKey& k) { k.plan.m += 1; },                    [](GemmKey& k) { k.plan.n += 1; },
      [](GemmKey& k) { k.plan.k += 1; },                    [](GemmKey& k) { k.plan.batch += 1; },
      [](GemmKey& k) { k.plan.stride_a += 1; },             [](GemmKey& k) { k.plan.stride_b += 1; },
      [](GemmKey& k) { k.plan.stride_c += 1; },             [](GemmKey& k) { k.device = 1; },
      [](GemmKey& k) { k.stream = kStream1; },              [](GemmKey& k) { k.dtype = 2; },
      [](GemmKey& k) { k.epilogue = GemmEpilogue::kBias; }, [](GemmKey& k) { k.alignment = 16; },
  };
  GemmPlanCache<Entry> cache(64);
  int built = 0;
  const std::shared_ptr<Entry> first = Get(cache, Key(base), &built);
  for (size_t i = 0; i < changes.size(); ++i) {
    GemmKey k = Key(base);
    changes[i](k);
    EXPECT_FALSE(k == Key(base)) << "change " << i;
    EXPECT_NE(Get(cache, k, &built)->id, first->id) << "change " << i;
  }
  EXPECT_EQ(Get(cache, Key(base), &built), first);
  const GemmCacheStats s = cache.Stats();
  EXPECT_EQ(s.misses, 1 + static_cast<int64_t>(changes.size()));
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.size, s.misses);
}

// The products of one step of a 2-layer GPT block stack (batch 2, seq 8, C 16, vocab 40), in the order
// the kernels issue them: per linear x · wᵀ (+ bias), dgrad g · w, wgrad gᵀ · x summed over the batch.
std::vector<GemmKey> StepKeys(const void* stream) {
  constexpr int64_t B = 2, T = 8, C = 16, V = 40;
  struct Linear {
    int64_t in, out;
    bool bias;
  };
  const std::vector<Linear> block = {{C, 3 * C, true}, {C, C, true}, {C, 4 * C, true}, {4 * C, C, true}};
  std::vector<GemmKey> keys;
  auto add = [&](const Linear& l) {
    const GemmEpilogue epi = l.bias ? GemmEpilogue::kBias : GemmEpilogue::kNone;
    // forward x [B, T, in] · (w [out, in])ᵀ: w read through its transposed view
    keys.push_back(Key(Plan({B, T, l.in}, {T * l.in, l.in, 1}, {l.in, l.out}, {1, l.in}), stream, epi));
    // dgrad g [B, T, out] · w [out, in]
    keys.push_back(Key(Plan({B, T, l.out}, {T * l.out, l.out, 1}, {l.out, l.in}, {l.in, 1}), stream));
    // wgrad Σ_b gᵀ [out, T] · x [T, in]: g read transposed
    keys.push_back(
        Key(Plan({B, l.out, T}, {T * l.out, 1, l.out}, {B, T, l.in}, {T * l.in, l.in, 1}, /*sum_batch=*/true), stream));
  };
  for (int layer = 0; layer < 2; ++layer) {
    for (const Linear& l : block) add(l);
  }
  add({C, V, false});  // the head
  return keys;
}

TEST(GemmCacheTest, RepeatedStepsBuildEachPlanOnceAndHitAfterwards) {
  GemmPlanCache<Entry> cache(512);
  int built = 0;
  const std::vector<GemmKey> step = StepKeys(kStream0);
  ASSERT_EQ(step.size(), 27u);  // 2 layers x 4 linears x 3 products + the head's 3
  for (int s = 0; s < 3; ++s) {
    for (const GemmKey& k : step) Get(cache, k, &built);
    // 4 distinct linear shapes x 3 products + the head's 3; the second layer repeats the first's.
    EXPECT_EQ(cache.Stats().misses, 15) << "step " << s;
  }
  EXPECT_EQ(cache.Stats().hits, 3 * 27 - 15);
  EXPECT_EQ(built, 15);
  for (const GemmKey& k : StepKeys(kStream1)) Get(cache, k, &built);  // another stream: its own entries
  EXPECT_EQ(cache.Stats().misses, 30);
  EXPECT_EQ(cache.Stats().size, 30);
  EXPECT_EQ(cache.Stats().evictions, 0);
}

TEST(GemmCacheTest, LeastRecentlyUsedEntryIsEvictedAndLivesWhileHeld) {
  const int alive_before = Entry::alive;
  {
    GemmPlanCache<Entry> cache(2);
    int built = 0;
    const GemmKey a = Key(Plan({2, 3}, {3, 1}, {3, 4}, {4, 1})), b = Key(Plan({2, 5}, {5, 1}, {5, 4}, {4, 1})),
                  c = Key(Plan({2, 7}, {7, 1}, {7, 4}, {4, 1}));
    std::shared_ptr<Entry> held_b = Get(cache, b, &built);
    Get(cache, a, &built);
    Get(cache, b, &built);  // b is now the most recently used
    Get(cache, c, &built);  // evicts a
    EXPECT_EQ(cache.Stats().evictions, 1);
    EXPECT_EQ(Entry::alive - alive_before, 2);  // a destroyed; b (cached and held) and c alive
    EXPECT_EQ(Get(cache, b, &built), held_b);   // still cached
    Get(cache, a, &built);                      // rebuilt; evicts c (b was used after c)
    EXPECT_EQ(cache.Stats().misses, 4);
    EXPECT_EQ(cache.Stats().evictions, 2);
    cache.Clear();
    EXPECT_EQ(Entry::alive - alive_before, 1);  // only the caller's b
    EXPECT_EQ(held_b->id, 0);
  }
  EXPECT_EQ(Entry::alive, alive_before);
}

TEST(GemmCacheTest, PointerAlignmentIsTheLargestCommonPowerOfTwoUpTo256) {
  auto at = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  EXPECT_EQ(PointerAlignment({at(0x10000), at(0x20000)}), 256);
  EXPECT_EQ(PointerAlignment({at(0x10000), at(0x10010)}), 16);
  EXPECT_EQ(PointerAlignment({at(0x10000), nullptr, at(0x10002)}), 2);
  EXPECT_EQ(PointerAlignment({at(0x10001)}), 1);
  EXPECT_EQ(PointerAlignment({nullptr}), 256);
}

}  // namespace
}  // namespace tessel::cuda
