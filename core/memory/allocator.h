// core/memory/allocator.h — the one allocator every tensor byte goes through, and the memory ledger.
//
// Invariant: for every device, Stats(d).ledger[l].live equals the sum of nbytes of the live Blocks
// on d tagged l, and peak is the maximum live ever reached since the last ResetPeaks(d). Blocks are
// tagged with the thread's current ledger at allocation (LedgerScope) and can be re-tagged later
// (a gradient computed as an activation becomes a `grads` byte when it is accumulated into .grad).
//
// Example:
//   { memory::LedgerScope s(memory::Ledger::kOptimState); auto m = Zeros({n}); }   // counted as optim
//   std::cout << memory::Report();    // table: device × ledger, live and peak MiB
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/device.h"

namespace tessel::memory {

// What a byte is for. "Which ledger blew up?" is answered by Report().
enum class Ledger : uint8_t {
  kParams,
  kGrads,
  kOptimState,
  kActivations,
  kCommBuffers,
  kOffloaded,  // sharded state kept in host memory for a GPU run (offload_policy)
  kOther,
};
inline constexpr int kNumLedgers = 7;
std::string_view LedgerName(Ledger ledger);  // "params", "grads", "optim", ...

// Tags allocations made by this thread while alive. Nests; the innermost wins.
class LedgerScope {
 public:
  explicit LedgerScope(Ledger ledger);
  ~LedgerScope();
  LedgerScope(const LedgerScope&) = delete;
  LedgerScope& operator=(const LedgerScope&) = delete;

 private:
  Ledger previous_;
};
Ledger CurrentLedger();

// An owned, 64-byte aligned allocation. Move-only; frees and un-counts itself on destruction.
class Block {
 public:
  Block(void* data, int64_t nbytes, Device device, Ledger ledger);
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Ledger ledger() const { return ledger_; }
  // Moves this block's bytes from its ledger to `ledger` (live and peak accounting follow).
  void Retag(Ledger ledger);

 private:
  void* data_;
  int64_t nbytes_;
  Device device_;
  Ledger ledger_;
};

// Allocates `nbytes` on `device` under CurrentLedger(). nbytes == 0 gives a valid empty block.
std::unique_ptr<Block> Allocate(int64_t nbytes, Device device);

struct Counter {
  int64_t live = 0;
  int64_t peak = 0;
};
struct DeviceStats {
  std::array<Counter, kNumLedgers> ledger;
  Counter total;
  int64_t num_allocs = 0;
  const Counter& operator[](Ledger l) const { return ledger[static_cast<int>(l)]; }
};

DeviceStats Stats(Device device);
// Sets every peak on `device` to its current live value.
void ResetPeaks(Device device);
// A table of every device that ever allocated: rows = ledgers, columns = live / peak (MiB and bytes).
std::string Report();
std::string Report(Device device);

// Bytes of freed large host blocks kept for reuse (see [Note: host block cache] in allocator.cc); not
// counted in any ledger. EmptyCache() returns them to the system, and the device allocator's cached
// blocks to the device.
int64_t CachedHostBytes();
void EmptyCache();

// Backends for non-CPU devices plug in here: InstallDeviceBackend (device_backend.h) registers a
// CachingAllocator over the GPU runtime. alloc returns nullptr when the device is out of memory.
struct DeviceAllocator {
  std::function<void*(int64_t nbytes, int index)> alloc;
  std::function<void(void* ptr, int index)> free;
  std::function<std::string(int index)> describe;  // optional: one line for out-of-memory messages
  std::function<void()> empty_cache;               // optional: called by EmptyCache()
};
void RegisterDeviceAllocator(DeviceType type, DeviceAllocator allocator);

}  // namespace tessel::memory
