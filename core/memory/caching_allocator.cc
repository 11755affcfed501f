// core/memory/caching_allocator.cc — best-fit pools per (device, stream, size class), block splitting
// and merging inside backend segments.
#include "core/memory/caching_allocator.h"

#include <cstdio>
#include <tuple>
#include <vector>

#include "core/base/error.h"

namespace tessel::memory {

struct CachingAllocator::Block {
  int device = 0;
  StreamHandle stream = nullptr;
  bool small = false;
  char* ptr = nullptr;
  int64_t size = 0;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
};

bool CachingAllocator::PoolKey::operator<(const PoolKey& o) const {
  return std::tie(device, stream, small) < std::tie(o.device, o.stream, o.small);
}

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->size, a->ptr) < std::tie(b->size, b->ptr);
}

CachingAllocator::CachingAllocator(DeviceBackend* backend) : backend_(backend) {
  TESSEL_CHECK(backend_ != nullptr, "CachingAllocator: null backend");
}

CachingAllocator::~CachingAllocator() {
  for (Block* head : segments_) {
    backend_->Free(head->device, head->ptr);
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

int64_t CachingAllocator::RoundSize(int64_t nbytes) { return ((nbytes + kRound - 1) / kRound) * kRound; }

int64_t CachingAllocator::SegmentSize(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMidSize) return kLargeSegment;
  return ((rounded + kLargeRound - 1) / kLargeRound) * kLargeRound;
}

CachingAllocatorStats& CachingAllocator::StatsFor(int device) { return stats_[device]; }

// Best fit: the smallest free block of at least `rounded` bytes (ties: lowest address).
CachingAllocator::Block* CachingAllocator::FindFree(Pool& pool, int64_t rounded, bool small) {
  Block probe;
  probe.size = rounded;
  probe.ptr = nullptr;
  auto it = pool.lower_bound(&probe);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::NewSegment(const PoolKey& key, int64_t rounded) {
  const int64_t size = SegmentSize(rounded);
  void* p = backend_->Malloc(key.device, size);
  if (p == nullptr) return nullptr;
  auto* b = new Block{key.device, key.stream, key.small, static_cast<char*>(p), size};
  segments_.insert(b);
  CachingAllocatorStats& s = StatsFor(key.device);
  s.reserved_bytes += size;
  s.num_segment_mallocs += 1;
  return b;
}

// Splits `block` (not in any pool) so it keeps `rounded` bytes; the rest goes back to `pool`.
void CachingAllocator::Split(Block* block, int64_t rounded, Pool& pool, bool small) {
  const int64_t rest = block->size - rounded;
  const bool split = small ? rest >= kRound : rest > kSmallSize;
  if (!split) return;
  auto* r = new Block{block->device, block->stream, block->small, block->ptr + rounded, rest};
  r->prev = block;
  r->next = block->next;
  if (block->next != nullptr) block->next->prev = r;
  block->next = r;
  block->size = rounded;
  pool.insert(r);
}

void* CachingAllocator::Allocate(int device, int64_t nbytes, StreamHandle stream) {
  TESSEL_INTERNAL_ASSERT(nbytes > 0, "CachingAllocator::Allocate: size ", nbytes);
  const int64_t rounded = RoundSize(nbytes);
  const bool small = rounded <= kSmallSize;
  std::lock_guard<std::mutex> lock(mu_);
  const PoolKey key{device, stream, small};
  Pool& pool = pools_[key];
  Block* b = FindFree(pool, rounded, small);
  if (b == nullptr) b = NewSegment(key, rounded);
  if (b == nullptr) {
    // Out of memory: give back every whole free segment of this device (any stream) and retry once.
    StatsFor(device).num_oom_retries += 1;
    ReleaseFreeSegments(device);
    b = NewSegment(key, rounded);
    if (b == nullptr) return nullptr;
  }
  Split(b, rounded, pool, small);
  b->allocated = true;
  allocated_[b->ptr] = b;
  StatsFor(device).allocated_bytes += b->size;
  return b->ptr;
}

void CachingAllocator::Free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.find(ptr);
  TESSEL_INTERNAL_ASSERT(it != allocated_.end(), "CachingAllocator::Free: pointer ", ptr,
                         " was not allocated here or was freed twice");
  Block* b = it->second;
  allocated_.erase(it);
  b->allocated = false;
  StatsFor(b->device).allocated_bytes -= b->size;
  Pool& pool = pools_[PoolKey{b->device, b->stream, b->small}];
  // Merge with free neighbours (they are in the same pool: a segment belongs to one stream).
  if (Block* n = b->next; n != nullptr && !n->allocated) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    delete n;
  }
  if (Block* p = b->prev; p != nullptr && !p->allocated) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    delete b;
    b = p;
  }
  pool.insert(b);
}

void CachingAllocator::ReleaseFreeSegments(int device) {
  std::vector<Block*> whole;
  for (Block* head : segments_) {
    if ((device < 0 || head->device == device) && !head->allocated && head->next == nullptr) whole.push_back(head);
  }
  for (Block* head : whole) {
    pools_[PoolKey{head->device, head->stream, head->small}].erase(head);
    segments_.erase(head);
    CachingAllocatorStats& s = StatsFor(head->device);
    s.reserved_bytes -= head->size;
    s.num_segment_frees += 1;
    backend_->Free(head->device, head->ptr);
    delete head;
  }
}

void CachingAllocator::EmptyCache(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseFreeSegments(device);
}

CachingAllocatorStats CachingAllocator::Stats(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stats_.find(device);
  return it == stats_.end() ? CachingAllocatorStats{} : it->second;
}

int64_t CachingAllocator::NumSegments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(segments_.size());
}

std::string CachingAllocator::Describe(int device) const {
  const CachingAllocatorStats s = Stats(device);
  char line[200];
  std::snprintf(line, sizeof(line),
                "cuda:%d caching allocator: allocated %.3f MiB, reserved %.3f MiB (cached %.3f MiB), %lld segment "
                "mallocs, %lld segment frees",
                device, s.allocated_bytes / 1048576.0, s.reserved_bytes / 1048576.0, s.cached_bytes() / 1048576.0,
                static_cast<long long>(s.num_segment_mallocs), static_cast<long long>(s.num_segment_frees));
  return line;
}

}  // namespace tessel::memory
