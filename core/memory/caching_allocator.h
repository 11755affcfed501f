// core/memory/caching_allocator.h — a stream-ordered caching allocator for device memory, written
// against DeviceBackend so its bookkeeping is tested on the CPU with a fake backend. Same policy as
// PyTorch's CUDACachingAllocator, reduced to what tessel needs.
//
// Invariant: every byte the backend handed out (a *segment*) is tiled, without gaps or overlap, by
// blocks that are either allocated or free; a free block never touches another free block of its segment
// (they are merged); free blocks sit in the pool of the (device, stream) that allocated them and are
// reused only by allocations on that stream, so reuse is ordered after the freeing stream's earlier
// work without events. In the steady state (the same sizes every step) Allocate and Free never call
// the backend: no cudaMalloc/cudaFree. The backend is called to free only by EmptyCache and by the
// out-of-memory retry, and only for whole free segments.
//
// Sizes: requests round up to 512 B. Requests <= 1 MiB come from 2 MiB segments (small pool); larger
// requests from segments of 20 MiB (requests < 10 MiB) or the request rounded up to 2 MiB. A free
// block is split when the rest is >= 512 B (small pool) or > 1 MiB (large pool).
//
// Example:
//   CachingAllocator cache(&backend);
//   void* p = cache.Allocate(0, 4096, stream);   // one 2 MiB segment from the backend
//   cache.Free(p);                               // back to (device 0, stream)'s pool; no backend call
//   void* q = cache.Allocate(0, 4096, stream);   // q == p
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "core/memory/device_backend.h"

namespace tessel::memory {

struct CachingAllocatorStats {
  int64_t allocated_bytes = 0;  // rounded sizes of live blocks
  int64_t reserved_bytes = 0;   // bytes of all segments held from the backend
  int64_t num_segment_mallocs = 0;
  int64_t num_segment_frees = 0;
  int64_t num_oom_retries = 0;  // allocations that freed the cache and retried
  int64_t cached_bytes() const { return reserved_bytes - allocated_bytes; }
};

class CachingAllocator {
 public:
  static constexpr int64_t kRound = 512;
  static constexpr int64_t kSmallSize = int64_t{1} << 20;     // requests up to here use the small pool
  static constexpr int64_t kSmallSegment = int64_t{2} << 20;  // segment size of the small pool
  static constexpr int64_t kMidSize = int64_t{10} << 20;      // requests below this get a kLargeSegment
  static constexpr int64_t kLargeSegment = int64_t{20} << 20;
  static constexpr int64_t kLargeRound = int64_t{2} << 20;

  explicit CachingAllocator(DeviceBackend* backend);  // not owned; must outlive this
  ~CachingAllocator();                                // returns every segment (live blocks included)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullptr when the device stays out of memory after freeing this device's cached segments.
  // REQUIRES: nbytes > 0.
  void* Allocate(int device, int64_t nbytes, StreamHandle stream);
  // REQUIRES: ptr came from Allocate and was not freed (else kInternal).
  void Free(void* ptr);
  // Returns every whole free segment of `device` (-1: all devices) to the backend.
  void EmptyCache(int device = -1);

  CachingAllocatorStats Stats(int device) const;
  // One line: "cuda:0 caching allocator: allocated X MiB, reserved Y MiB (cached Z MiB), N segments".
  std::string Describe(int device) const;
  // Number of segments currently held (all devices).
  int64_t NumSegments() const;

 private:
  struct Block;
  struct PoolKey {
    int device;
    StreamHandle stream;
    bool small;
    bool operator<(const PoolKey& o) const;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  static int64_t RoundSize(int64_t nbytes);
  static int64_t SegmentSize(int64_t rounded);
  Block* FindFree(Pool& pool, int64_t rounded, bool small);
  Block* NewSegment(const PoolKey& key, int64_t rounded);
  void Split(Block* block, int64_t rounded, Pool& pool, bool small);
  void ReleaseFreeSegments(int device);
  CachingAllocatorStats& StatsFor(int device);

  DeviceBackend* backend_;
  mutable std::mutex mu_;
  std::map<PoolKey, Pool> pools_;
  std::unordered_map<void*, Block*> allocated_;
  std::set<Block*> segments_;  // the first block of every segment
  std::map<int, CachingAllocatorStats> stats_;
};

}  // namespace tessel::memory
