// core/memory/caching_allocator_test.cc — the caching allocator's bookkeeping (splitting, merging,
// per-stream pools, steady state without backend calls, out-of-memory retry), its ledger accounting
// through memory::Allocate, and RAII streams/events, all through the fake device backend.
#include "core/memory/caching_allocator.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/memory/allocator.h"
#include "core/memory/stream.h"
#include "core/memory/testing/fake_device_backend.h"

namespace tessel::memory {
namespace {

using testing::FakeDeviceBackend;
using tessel::testing::ExpectErrorContains;
constexpr int64_t kMiB = int64_t{1} << 20;

char* Ptr(void* p) { return static_cast<char*>(p); }

TEST(CachingAllocatorTest, FreedBlockIsReusedWithoutBackendCall) {
  FakeDeviceBackend fake(1, 1 << 30);
  CachingAllocator cache(&fake);
  void* p = cache.Allocate(0, 4096, nullptr);
  EXPECT_EQ(fake.num_malloc, 1);
  EXPECT_EQ(cache.Stats(0).reserved_bytes, CachingAllocator::kSmallSegment);
  EXPECT_EQ(cache.Stats(0).allocated_bytes, 4096);
  cache.Free(p);
  EXPECT_EQ(cache.Stats(0).allocated_bytes, 0);
  EXPECT_EQ(cache.Stats(0).cached_bytes(), CachingAllocator::kSmallSegment);
  EXPECT_EQ(cache.Allocate(0, 4000, nullptr), p);  // 4000 rounds to 4096: the same block
  EXPECT_EQ(fake.num_malloc, 1);
  EXPECT_EQ(fake.num_free, 0);
}

TEST(CachingAllocatorTest, SteadyStateTrainingStepsNeverCallTheBackend) {
  FakeDeviceBackend fake(1, 1 << 30);
  CachingAllocator cache(&fake);
  const std::vector<int64_t> sizes = {1000, 300000, 3 * kMiB, 12 * kMiB + 7, 512, 5 * kMiB};
  auto step = [&] {
    std::vector<void*> live;
    for (int64_t s : sizes) live.push_back(cache.Allocate(0, s, nullptr));
    for (auto it = live.rbegin(); it != live.rend(); ++it) cache.Free(*it);
  };
  step();
  const int64_t mallocs_after_first = fake.num_malloc;
  const int64_t reserved_after_first = cache.Stats(0).reserved_bytes;
  for (int i = 0; i < 50; ++i) step();
  EXPECT_EQ(fake.num_malloc, mallocs_after_first);
  EXPECT_EQ(fake.num_free, 0);
  EXPECT_EQ(cache.Stats(0).reserved_bytes, reserved_after_first);
  // Small pool: 1000 + 300000 + 512 fit one 2 MiB segment. Large pool: 3 MiB opens a 20 MiB segment,
  // 12 MiB + 7 (12 MiB + 512 rounded) best-fits its 17 MiB remainder, and 5 MiB no longer fits the
  // 5 MiB - 512 B tail, so it opens a second 20 MiB segment.
  EXPECT_EQ(mallocs_after_first, 3);
  EXPECT_EQ(reserved_after_first, 2 * kMiB + 20 * kMiB + 20 * kMiB);
}

TEST(CachingAllocatorTest, SmallRequestsSplitOneSegmentInAddressOrder) {
  FakeDeviceBackend fake(1, 1 << 30);
  CachingAllocator cache(&fake);
  std::vector<void*> p;
  for (int i = 0; i < 4; ++i) p.push_back(cache.Allocate(0, 512 * 1024, nullptr));
  EXPECT_EQ(fake.num_malloc, 1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(Ptr(p[i]) - Ptr(p[0]), i * 512 * 1024);
  void* fifth = cache.Allocate(0, 512 * 1024, nullptr);  // the 2 MiB segment is full
  EXPECT_EQ(fake.num_malloc, 2);
  EXPECT_EQ(cache.NumSegments(), 2);
  cache.Free(fifth);
  for (void* q : p) cache.Free(q);
}

TEST(CachingAllocatorTest, FreedNeighboursMergeAndBestFitPicksTheMergedBlock) {
  FakeDeviceBackend fake(1, 1 << 30);
  CachingAllocator cache(&fake);
  void* a = cache.Allocate(0, 1000, nullptr);  // 1024 each after rounding
  void* b = cache.Allocate(0, 1000, nullptr);
  void* c = cache.Allocate(0, 1000, nullptr);
  EXPECT_EQ(Ptr(b) - Ptr(a), 1024);
  EXPECT_EQ(Ptr(c) - Ptr(b), 1024);
  cache.Free(b);
  cache.Free(a);  // a + b merge into one free 2048 B block; the segment tail is a larger free block
  EXPECT_EQ(cache.Allocate(0, 2048, nullptr), a);  // best fit: the merged block, not the tail
  void* d = cache.Allocate(0, 1024, nullptr);
  EXPECT_EQ(Ptr(d) - Ptr(c), 1024);  // from the tail, right after c
  EXPECT_EQ(fake.num_malloc, 1);
  cache.Free(a);
  cache.Free(c);
  cache.Free(d);
  // Everything merged back into one whole free segment: EmptyCache can return it.
  cache.EmptyCache();
  EXPECT_EQ(fake.num_free, 1);
  EXPECT_EQ(cache.Stats(0).reserved_bytes, 0);
}

TEST(CachingAllocatorTest, BlocksFreedOnOneStreamAreNotReusedByAnother) {
  FakeDeviceBackend fake(1, 1 << 30);
  CachingAllocator cache(&fake);
  StreamHandle s1 = fake.CreateStream(0), s2 = fake.CreateStream(0);
  void* p = cache.Allocate(0, 8192, s1);
  cache.Free(p);
  void* q = cache.Allocate(0, 8192, s2);
  EXPECT_NE(q, p);
  EXPECT_EQ(fake.num_malloc, 2);
  EXPECT_EQ(cache.Allocate(0, 8192, s1), p);  // s1's pool still holds it
  EXPECT_EQ(fake.num_malloc, 2);
}

TEST(CachingAllocatorTest, DevicesKeepSeparateSegmentsAndStats) {
  FakeDeviceBackend fake(2, 1 << 30);
  CachingAllocator cache(&fake);
  void* p0 = cache.Allocate(0, 3 * kMiB, nullptr);
  void* p1 = cache.Allocate(1, 1024, nullptr);
  EXPECT_EQ(cache.Stats(0).reserved_bytes, 20 * kMiB);
  EXPECT_EQ(cache.Stats(1).reserved_bytes, 2 * kMiB);
  EXPECT_EQ(fake.UsedBytes(1), 2 * kMiB);
  cache.Free(p0);
  cache.Free(p1);
  cache.EmptyCache(1);
  EXPECT_EQ(cache.Stats(1).reserved_bytes, 0);
  EXPECT_EQ(cache.Stats(0).reserved_bytes, 20 * kMiB);
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesCachedSegmentsOfAnyStreamThenRetries) {
  FakeDeviceBackend fake(1, 24 * kMiB);
  CachingAllocator cache(&fake);
  StreamHandle s1 = fake.CreateStream(0), s2 = fake.CreateStream(0);
  cache.Free(cache.Allocate(0, 12 * kMiB, s1));  // 12 MiB cached on s1
  void* big = cache.Allocate(0, 20 * kMiB, s2);  // 12 + 20 > 24: release s1's segment, retry
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(cache.Stats(0).num_oom_retries, 1);
  EXPECT_EQ(cache.Stats(0).num_segment_frees, 1);
  EXPECT_EQ(cache.Stats(0).reserved_bytes, 20 * kMiB);
  EXPECT_EQ(cache.Allocate(0, 8 * kMiB, s2), nullptr);  // 20 live + 20 MiB segment > 24, nothing cached
  EXPECT_EQ(cache.Stats(0).num_oom_retries, 2);
  cache.Free(big);
}

TEST(CachingAllocatorTest, DoubleFreeIsAnInternalError) {
  FakeDeviceBackend fake(1, 1 << 30);
  CachingAllocator cache(&fake);
  void* p = cache.Allocate(0, 64, nullptr);
  cache.Free(p);
  ExpectErrorContains([&] { cache.Free(p); }, ErrorCode::kInternal, "freed twice");
}

// --- Through the installed backend: memory::Allocate, ledgers, streams, events. ---

FakeDeviceBackend& Installed() {
  static FakeDeviceBackend* fake = [] {
    auto f = std::make_unique<FakeDeviceBackend>(2, 64 * kMiB);
    FakeDeviceBackend* raw = f.get();
    InstallDeviceBackend(std::move(f));
    return raw;
  }();
  return *fake;
}

TEST(DeviceLedgerTest, CudaBlocksCountRequestedBytesInTheLedgerAndReturnToTheCache) {
  FakeDeviceBackend& fake = Installed();
  const Device d = Device::Cuda(1);
  const int64_t mallocs = fake.num_malloc;
  {
    LedgerScope s(Ledger::kActivations);
    auto b = Allocate(3000, d);
    EXPECT_EQ(Stats(d)[Ledger::kActivations].live, 3000);
    EXPECT_EQ(b->device(), d);
    EXPECT_EQ(fake.num_malloc, mallocs + 1);
  }
  EXPECT_EQ(Stats(d)[Ledger::kActivations].live, 0);
  EXPECT_EQ(Stats(d)[Ledger::kActivations].peak, 3000);
  {
    LedgerScope s(Ledger::kGrads);
    auto b = Allocate(3000, d);  // the cached block: no backend call
    EXPECT_EQ(Stats(d)[Ledger::kGrads].live, 3000);
    EXPECT_EQ(fake.num_malloc, mallocs + 1);
  }
  EXPECT_EQ(fake.UsedBytes(1), 2 * kMiB);
  EXPECT_EQ(DeviceCacheStats(1).reserved_bytes, 2 * kMiB);
  EXPECT_EQ(DeviceCacheStats(1).allocated_bytes, 0);
  EmptyCache();
  EXPECT_EQ(fake.UsedBytes(1), 0);
}

TEST(DeviceLedgerTest, OutOfMemoryNamesDeviceLedgerAndCache) {
  Installed();
  LedgerScope s(Ledger::kOptimState);
  ExpectErrorContains([&] { Allocate(200 * kMiB, Device::Cuda(0)); }, ErrorCode::kFailedPrecondition,
                      {"out of memory on cuda:0", "209715200 bytes", "'optim' ledger", "caching allocator",
                       "memory ledger cuda:0"});
}

TEST(DeviceLedgerTest, AllocationsFollowTheCurrentStream) {
  FakeDeviceBackend& fake = Installed();
  const Device d = Device::Cuda(0);
  Stream side(d);
  EXPECT_EQ(CurrentStream(d), nullptr);
  void* on_side = nullptr;
  {
    StreamGuard g(side);
    EXPECT_EQ(CurrentStream(d), side.handle());
    on_side = Allocate(4096, d)->data();  // freed at once: back to side's pool
  }
  EXPECT_EQ(CurrentStream(d), nullptr);
  auto on_default = Allocate(4096, d);
  EXPECT_NE(on_default->data(), on_side);
  StreamGuard g(side);
  EXPECT_EQ(Allocate(4096, d)->data(), on_side);
  (void)fake;
}

TEST(StreamEventTest, RaiiCreatesAndDestroysEachHandleOnce) {
  FakeDeviceBackend& fake = Installed();
  const int64_t s0 = fake.num_streams_destroyed, e0 = fake.num_events_destroyed;
  {
    Stream a(Device::Cuda(0));
    Stream b = std::move(a);
    Event e(Device::Cuda(0));
    Event f = std::move(e);
  }
  EXPECT_EQ(fake.num_streams_destroyed - s0, 1);
  EXPECT_EQ(fake.num_events_destroyed - e0, 1);
}

TEST(StreamEventTest, EventOrdersAnotherStreamAfterTheRecordedWork) {
  FakeDeviceBackend& fake = Installed();
  const Device d = Device::Cuda(0);
  Stream producer(d), consumer(d);
  std::vector<unsigned char> dst(64, 0), src(64, 7);
  fake.MemcpyAsync(dst.data(), src.data(), 64, CopyKind::kHostToDevice, 0, producer.handle());
  Event ready(d);
  ready.Record(producer);
  EXPECT_FALSE(ready.Query());  // the fake device has not run it yet
  ready.Block(consumer);
  consumer.Synchronize();  // runs the wait, which drains the producer up to the event
  EXPECT_TRUE(ready.Query());
  EXPECT_EQ(dst[63], 7);
  EXPECT_EQ(fake.Pending(0, producer.handle()), 0);
}

TEST(StreamEventTest, StreamsExistOnCudaDevicesOnly) {
  Installed();
  ExpectErrorContains([] { Stream s(Device::Cpu(0)); }, ErrorCode::kInvalidArgument,
                      {"Stream", "CUDA devices only", "cpu:0"});
}

TEST(StreamEventTest, SecondBackendIsRejected) {
  Installed();
  ExpectErrorContains([] { InstallDeviceBackend(std::make_unique<FakeDeviceBackend>(1, 1)); },
                      ErrorCode::kFailedPrecondition, {"'fake' backend is already installed"});
}

}  // namespace
}  // namespace tessel::memory
