// core/memory/testing/fake_device_backend.h — a DeviceBackend on host memory for CPU tests of
// everything above the GPU runtime: the caching allocator, streams/events, device-aware copies and
// CUDA dispatch.
//
// Invariant: behaves like a stream-ordered GPU runtime whose device is slow: MemcpyAsync/MemsetAsync
// only *enqueue* work on their stream, which runs when something waits for it (SynchronizeStream, an
// event's Synchronize/Query, or a stream that waits on an event and is itself drained). So a caller
// that reuses or frees host memory before the copy reading it was waited for gets wrong values, as it
// would on a GPU. Device memory is capped per device (`capacity`), so out-of-memory paths are testable.
// Every call is counted. Single-threaded use only (tests).
//
// Example:
//   auto fake = std::make_unique<testing::FakeDeviceBackend>(/*num_devices=*/2, /*capacity=*/64 << 20);
//   testing::FakeDeviceBackend* f = fake.get();
//   memory::InstallDeviceBackend(std::move(fake));
//   Tensor g = Ones({4}).To(Device::Cuda(0));   // f->num_memcpy == 1
#pragma once

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/device_backend.h"

namespace tessel::memory::testing {

class FakeDeviceBackend : public DeviceBackend {
 public:
  FakeDeviceBackend(int num_devices, int64_t capacity) : num_devices_(num_devices), capacity_(capacity) {
    used_.assign(num_devices, 0);
  }
  ~FakeDeviceBackend() override {
    for (auto& [p, a] : live_) std::free(p);
  }

  std::string name() const override { return "fake"; }
  int DeviceCount() override { return num_devices_; }

  void* Malloc(int device, int64_t nbytes) override {
    ++num_malloc;
    if (used_.at(device) + nbytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(256, static_cast<size_t>((nbytes + 255) / 256 * 256));
    used_[device] += nbytes;
    live_[p] = {device, nbytes};
    return p;
  }
  void Free(int device, void* ptr) override {
    ++num_free;
    auto it = live_.find(ptr);
    if (it == live_.end() || it->second.first != device) std::abort();  // a test bug: fail loudly
    used_[device] -= it->second.second;
    live_.erase(it);
    std::free(ptr);
  }
  void* MallocHost(int64_t nbytes) override {
    ++num_malloc_host;
    void* p = std::aligned_alloc(64, static_cast<size_t>((nbytes + 63) / 64 * 64));
    pinned_.emplace_back(p, nbytes);
    return p;
  }
  void FreeHost(void* ptr) override { std::free(ptr); }

  StreamHandle CreateStream(int device) override {
    ++num_streams_created;
    queues_.emplace_back(std::make_unique<Queue>());
    queues_.back()->device = device;
    return queues_.back().get();
  }
  void DestroyStream(int, StreamHandle) override { ++num_streams_destroyed; }
  void SynchronizeStream(int device, StreamHandle stream) override {
    Queue& q = Q(device, stream);
    RunUntil(q, q.enqueued);
  }

  EventHandle CreateEvent(int) override {
    ++num_events_created;
    events_.emplace_back(std::make_unique<FakeEvent>());
    return events_.back().get();
  }
  void DestroyEvent(int, EventHandle) override { ++num_events_destroyed; }
  void RecordEvent(int device, EventHandle event, StreamHandle stream) override {
    auto* e = static_cast<FakeEvent*>(event);
    e->queue = &Q(device, stream);
    e->seq = e->queue->enqueued;
  }
  bool QueryEvent(int, EventHandle event) override {
    auto* e = static_cast<FakeEvent*>(event);
    return e->queue == nullptr || e->queue->done >= e->seq;
  }
  void SynchronizeEvent(int, EventHandle event) override {
    auto* e = static_cast<FakeEvent*>(event);
    if (e->queue != nullptr) RunUntil(*e->queue, e->seq);
  }
  void StreamWaitEvent(int device, StreamHandle stream, EventHandle event) override {
    auto* e = static_cast<FakeEvent*>(event);
    Queue* src = e->queue;
    const int64_t seq = e->seq;
    Enqueue(Q(device, stream), [this, src, seq] {
      if (src != nullptr) RunUntil(*src, seq);
    });
  }

  void MemcpyAsync(void* dst, const void* src, int64_t nbytes, CopyKind kind, int device,
                   StreamHandle stream) override {
    ++num_memcpy;
    copies.push_back({kind, nbytes, IsPinned(src) || IsPinned(dst), stream});
    Enqueue(Q(device, stream), [dst, src, nbytes] { std::memcpy(dst, src, static_cast<size_t>(nbytes)); });
  }
  void MemsetAsync(void* dst, int value, int64_t nbytes, int device, StreamHandle stream) override {
    ++num_memset;
    Enqueue(Q(device, stream), [dst, value, nbytes] { std::memset(dst, value, static_cast<size_t>(nbytes)); });
  }

  // Work enqueued on `stream` of `device` that has not run yet.
  int64_t Pending(int device, StreamHandle stream) {
    Queue& q = Q(device, stream);
    return q.enqueued - q.done;
  }
  int64_t UsedBytes(int device) const { return used_.at(device); }

  struct CopyRecord {
    CopyKind kind;
    int64_t nbytes;
    bool pinned;  // one side is MallocHost memory
    StreamHandle stream;
  };
  std::vector<CopyRecord> copies;
  int64_t num_malloc = 0, num_free = 0, num_malloc_host = 0, num_memcpy = 0, num_memset = 0;
  int64_t num_streams_created = 0, num_streams_destroyed = 0, num_events_created = 0, num_events_destroyed = 0;

 private:
  struct Queue {
    int device = 0;
    std::deque<std::function<void()>> work;
    int64_t enqueued = 0;  // sequence number of the last enqueued item
    int64_t done = 0;      // sequence number of the last item run
  };
  struct FakeEvent {
    Queue* queue = nullptr;
    int64_t seq = 0;
  };

  Queue& Q(int device, StreamHandle stream) {
    if (stream != nullptr) return *static_cast<Queue*>(stream);
    auto& q = default_queues_[device];
    if (!q) q = std::make_unique<Queue>(), q->device = device;
    return *q;
  }
  static void Enqueue(Queue& q, std::function<void()> fn) {
    q.work.push_back(std::move(fn));
    ++q.enqueued;
  }
  static void RunUntil(Queue& q, int64_t seq) {
    while (q.done < seq) {
      std::function<void()> fn = std::move(q.work.front());
      q.work.pop_front();
      ++q.done;
      fn();
    }
  }
  bool IsPinned(const void* p) const {
    for (const auto& [b, n] : pinned_) {
      const char* c = static_cast<const char*>(b);
      if (static_cast<const char*>(p) >= c && static_cast<const char*>(p) < c + n) return true;
    }
    return false;
  }

  int num_devices_;
  int64_t capacity_;
  std::vector<int64_t> used_;
  std::map<void*, std::pair<int, int64_t>> live_;
  std::vector<std::pair<void*, int64_t>> pinned_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::map<int, std::unique_ptr<Queue>> default_queues_;
  std::vector<std::unique_ptr<FakeEvent>> events_;
};

// The process's fake backend, installed by the first call (InstallDeviceBackend is once per process;
// later calls return the same backend whatever their arguments).
inline FakeDeviceBackend& InstallFakeDeviceBackendOnce(int num_devices = 1, int64_t capacity = int64_t{64} << 20) {
  static FakeDeviceBackend* fake = [&] {
    auto f = std::make_unique<FakeDeviceBackend>(num_devices, capacity);
    FakeDeviceBackend* raw = f.get();
    InstallDeviceBackend(std::move(f));
    return raw;
  }();
  return *fake;
}

}  // namespace tessel::memory::testing
