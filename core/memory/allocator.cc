// core/memory/allocator.cc — counting allocator: aligned host memory plus per-device, per-ledger stats.
#include "core/memory/allocator.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>
#include <sstream>

#include "core/base/error.h"
#include "core/memory/host_pages.h"

namespace tessel::memory {
namespace {

constexpr int kMaxCpuSlots = 128;
constexpr int kMaxCudaSlots = 16;
constexpr int64_t kAlign = 64;

// [Note: host block cache] Large host blocks (>= kCacheMinBytes) are rounded up to a size class and,
// when freed, kept in a per-size free list instead of going back to glibc, which would
// munmap them; the next step's allocation of the same size then reuses warm pages instead of
// first-touch faulting every page (measured ~2 ms per MB on these VMs: 10-20% of a Linear step).
// Same policy as PyTorch's CUDA caching allocator. The ledger counts live bytes only; cached bytes are
// reported separately and released when an allocation fails or on EmptyCache().
// Blocks from kCacheMinBytes up are cached: rounded to kSmallCacheRound below kLargeCacheMin and to
// kLargeCacheRound above. glibc maps large blocks on their own pages (from 128 KiB at first; the threshold
// then follows the sizes freed) and trims the heap, so such blocks were refaulted every step: the small
// model of threads_vs_ranks spent ~4% of its CPU time first-touching pages. The price: a block just above
// a class boundary holds up to one class more (64 KiB + 1 B takes 128 KiB), which the ledger does not count.
constexpr int64_t kCacheMinBytes = int64_t{64} << 10;
constexpr int64_t kSmallCacheRound = int64_t{64} << 10;
constexpr int64_t kLargeCacheMin = int64_t{1} << 20;
constexpr int64_t kLargeCacheRound = int64_t{1} << 20;
constexpr int64_t kCacheMaxBytes = int64_t{4} << 30;

class HostBlockCache {
 public:
  void* Take(int64_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(rounded);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= rounded;
    return p;
  }
  // Returns false when the cache is full (the caller frees).
  bool Put(void* p, int64_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_bytes_ + rounded > kCacheMaxBytes) return false;
    free_[rounded].push_back(p);
    cached_bytes_ += rounded;
    return true;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, ptrs] : free_) {
      for (void* p : ptrs) std::free(p);
    }
    free_.clear();
    cached_bytes_ = 0;
  }
  int64_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
  }

 private:
  std::mutex mu_;
  std::map<int64_t, std::vector<void*>> free_;
  int64_t cached_bytes_ = 0;
};

HostBlockCache& HostCache() {
  static auto* cache = new HostBlockCache();
  return *cache;
}

int64_t HostRoundedSize(int64_t nbytes) {
  if (nbytes >= kCacheMinBytes) {
    const int64_t round = nbytes >= kLargeCacheMin ? kLargeCacheRound : kSmallCacheRound;
    return ((nbytes + round - 1) / round) * round;
  }
  const int64_t rounded = ((nbytes + kAlign - 1) / kAlign) * kAlign;
  return rounded == 0 ? kAlign : rounded;
}

void* HostAlloc(int64_t nbytes) {
  const int64_t rounded = HostRoundedSize(nbytes);
  if (nbytes >= kCacheMinBytes) {
    if (void* p = HostCache().Take(rounded)) return p;
  }
  // Large blocks on huge pages: [Note: huge pages] in host_pages.h.
  void* p = AllocateHostPages(rounded, kAlign);
  if (p == nullptr) {
    HostCache().Clear();
    p = AllocateHostPages(rounded, kAlign);
  }
  return p;
}

void HostFree(void* p, int64_t nbytes) {
  if (nbytes >= kCacheMinBytes && HostCache().Put(p, HostRoundedSize(nbytes))) return;
  std::free(p);
}

struct AtomicCounter {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
  void Add(int64_t n) {
    const int64_t now = live.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void Sub(int64_t n) { live.fetch_sub(n, std::memory_order_relaxed); }
};

struct Slot {
  std::array<AtomicCounter, kNumLedgers> ledger;
  AtomicCounter total;
  std::atomic<int64_t> num_allocs{0};
  std::atomic<bool> used{false};
};

std::array<Slot, kMaxCpuSlots>& CpuSlots() {
  static auto* slots = new std::array<Slot, kMaxCpuSlots>();
  return *slots;
}
std::array<Slot, kMaxCudaSlots>& CudaSlots() {
  static auto* slots = new std::array<Slot, kMaxCudaSlots>();
  return *slots;
}

Slot& SlotFor(Device d) {
  if (d.is_cpu()) {
    TESSEL_CHECK(d.index >= 0 && d.index < kMaxCpuSlots, "memory: cpu slot ", d.index, " out of range [0, ",
                 kMaxCpuSlots, ")");
    return CpuSlots()[d.index];
  }
  TESSEL_CHECK(d.index >= 0 && d.index < kMaxCudaSlots, "memory: cuda device ", d.index, " out of range");
  return CudaSlots()[d.index];
}

thread_local Ledger current_ledger = Ledger::kOther;

std::mutex& AllocatorMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
DeviceAllocator& CudaAllocator() {
  static auto* a = new DeviceAllocator();
  return *a;
}

}  // namespace

std::string_view LedgerName(Ledger ledger) {
  switch (ledger) {
    case Ledger::kParams: return "params";
    case Ledger::kGrads: return "grads";
    case Ledger::kOptimState: return "optim";
    case Ledger::kActivations: return "activations";
    case Ledger::kCommBuffers: return "comm";
    case Ledger::kOffloaded: return "offloaded";
    case Ledger::kOther: return "other";
  }
  return "?";
}

LedgerScope::LedgerScope(Ledger ledger) : previous_(current_ledger) { current_ledger = ledger; }
LedgerScope::~LedgerScope() { current_ledger = previous_; }
Ledger CurrentLedger() { return current_ledger; }

Block::Block(void* data, int64_t nbytes, Device device, Ledger ledger)
    : data_(data), nbytes_(nbytes), device_(device), ledger_(ledger) {
  Slot& s = SlotFor(device_);
  s.used.store(true, std::memory_order_relaxed);
  s.ledger[static_cast<int>(ledger_)].Add(nbytes_);
  s.total.Add(nbytes_);
  s.num_allocs.fetch_add(1, std::memory_order_relaxed);
}

Block::~Block() {
  Slot& s = SlotFor(device_);
  s.ledger[static_cast<int>(ledger_)].Sub(nbytes_);
  s.total.Sub(nbytes_);
  if (device_.is_cpu()) {
    HostFree(data_, nbytes_);
  } else if (data_ != nullptr && CudaAllocator().free) {
    CudaAllocator().free(data_, device_.index);
  }
}

void Block::Retag(Ledger ledger) {
  if (ledger == ledger_) return;
  Slot& s = SlotFor(device_);
  s.ledger[static_cast<int>(ledger_)].Sub(nbytes_);
  s.ledger[static_cast<int>(ledger)].Add(nbytes_);
  ledger_ = ledger;
}

std::unique_ptr<Block> Allocate(int64_t nbytes, Device device) {
  TESSEL_CHECK(nbytes >= 0, "memory::Allocate: negative size ", nbytes);
  void* data = nullptr;
  if (device.is_cpu()) {
    data = HostAlloc(nbytes);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, data != nullptr, "memory::Allocate: out of host memory (",
                      nbytes, " bytes requested on ", device, " for the '", LedgerName(current_ledger), "' ledger)\n",
                      Report(device));
  } else {
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, static_cast<bool>(CudaAllocator().alloc),
                      "memory::Allocate: no allocator registered for ", device,
                      " (build with the CUDA backend and run on a GPU machine)");
    data = nbytes == 0 ? nullptr : CudaAllocator().alloc(nbytes, device.index);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, nbytes == 0 || data != nullptr,
                      "memory::Allocate: out of memory on ", device, " allocating ", nbytes, " bytes for the '",
                      LedgerName(current_ledger), "' ledger\n",
                      CudaAllocator().describe ? CudaAllocator().describe(device.index) + "\n" : std::string(),
                      Report(device));
  }
  return std::make_unique<Block>(data, nbytes, device, current_ledger);
}

DeviceStats Stats(Device device) {
  Slot& s = SlotFor(device);
  DeviceStats out;
  for (int l = 0; l < kNumLedgers; ++l) {
    out.ledger[l].live = s.ledger[l].live.load();
    out.ledger[l].peak = s.ledger[l].peak.load();
  }
  out.total.live = s.total.live.load();
  out.total.peak = s.total.peak.load();
  out.num_allocs = s.num_allocs.load();
  return out;
}

void ResetPeaks(Device device) {
  Slot& s = SlotFor(device);
  for (auto& c : s.ledger) c.peak.store(c.live.load());
  s.total.peak.store(s.total.live.load());
}

std::string Report(Device device) {
  const DeviceStats st = Stats(device);
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof(line), "memory ledger %-8s %14s %14s\n", device.ToString().c_str(), "live MiB",
                "peak MiB");
  os << line;
  auto row = [&](std::string_view name, const Counter& c) {
    std::snprintf(line, sizeof(line), "  %-20.*s %14.3f %14.3f\n", static_cast<int>(name.size()), name.data(),
                  c.live / 1048576.0, c.peak / 1048576.0);
    os << line;
  };
  for (int l = 0; l < kNumLedgers; ++l) row(LedgerName(static_cast<Ledger>(l)), st.ledger[l]);
  row("total", st.total);
  return os.str();
}

std::string Report() {
  std::string out;
  for (int i = 0; i < kMaxCpuSlots; ++i) {
    if (CpuSlots()[i].used.load()) out += Report(Device::Cpu(i));
  }
  for (int i = 0; i < kMaxCudaSlots; ++i) {
    if (CudaSlots()[i].used.load()) out += Report(Device::Cuda(i));
  }
  return out;
}

int64_t CachedHostBytes() { return HostCache().cached_bytes(); }
void EmptyCache() {
  HostCache().Clear();
  if (CudaAllocator().empty_cache) CudaAllocator().empty_cache();
}

void RegisterDeviceAllocator(DeviceType type, DeviceAllocator allocator) {
  TESSEL_CHECK(type == DeviceType::kCuda, "RegisterDeviceAllocator: only CUDA can be registered");
  std::lock_guard<std::mutex> lock(AllocatorMutex());
  CudaAllocator() = std::move(allocator);
}

}  // namespace tessel::memory
