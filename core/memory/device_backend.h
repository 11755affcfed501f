// core/memory/device_backend.h — the small interface between tessel and a GPU runtime: device memory,
// pinned host memory, streams, events and async copies. The CUDA runtime implements it
// (core/memory/cuda_backend.cc, built only with a toolkit); tests implement it on host memory
// (core/memory/testing/fake_device_backend.h) so every piece of bookkeeping above it — the caching
// allocator, streams and events, device-aware copies, dispatch — is checked on machines without a GPU.
//
// Invariant: handles are opaque to everything above this interface; the null StreamHandle is the
// device's default stream. Malloc/MallocHost return nullptr when memory is exhausted (never throw for
// that: the caller frees its cache, retries, then raises an error naming the ledger). Any other runtime
// failure throws tessel::Error naming the call and the runtime's message.
//
// Example:
//   memory::InstallDeviceBackend(std::make_unique<FakeDeviceBackend>());   // or the CUDA backend
//   Tensor g = Zeros({4}, DType::kFloat32, Device::Cuda(0));                 // allocated through it
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tessel::memory {

using StreamHandle = void*;  // nullptr: the device's default (legacy) stream
using EventHandle = void*;

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string name() const = 0;  // "cuda", "fake"
  virtual int DeviceCount() = 0;

  // Device memory on `device` (an ordinal). nullptr when out of memory.
  virtual void* Malloc(int device, int64_t nbytes) = 0;
  virtual void Free(int device, void* ptr) = 0;
  // Page-locked host memory (staging for large host<->device copies). nullptr when out of memory.
  virtual void* MallocHost(int64_t nbytes) = 0;
  virtual void FreeHost(void* ptr) = 0;

  virtual StreamHandle CreateStream(int device) = 0;
  virtual void DestroyStream(int device, StreamHandle stream) = 0;
  virtual void SynchronizeStream(int device, StreamHandle stream) = 0;

  virtual EventHandle CreateEvent(int device) = 0;
  virtual void DestroyEvent(int device, EventHandle event) = 0;
  // Captures the work queued on `stream` so far.
  virtual void RecordEvent(int device, EventHandle event, StreamHandle stream) = 0;
  virtual bool QueryEvent(int device, EventHandle event) = 0;  // true once the captured work finished
  virtual void SynchronizeEvent(int device, EventHandle event) = 0;
  // Work queued on `stream` after this call starts only after `event`'s captured work finished.
  virtual void StreamWaitEvent(int device, StreamHandle stream, EventHandle event) = 0;

  // Stream-ordered copy/fill; `device` is the device whose stream runs it.
  virtual void MemcpyAsync(void* dst, const void* src, int64_t nbytes, CopyKind kind, int device,
                           StreamHandle stream) = 0;
  virtual void MemsetAsync(void* dst, int value, int64_t nbytes, int device, StreamHandle stream) = 0;
};

// Installs the process's GPU backend (the CUDA runtime is one per process, so this is one process-wide
// registration, like RegisterDeviceAllocator) and registers a CachingAllocator over it as the
// allocator of every Device{kCuda, i}. REQUIRES: called once per process, before any CUDA tensor exists
// (a second call throws kFailedPrecondition).
void InstallDeviceBackend(std::unique_ptr<DeviceBackend> backend);
// The installed backend, or nullptr.
DeviceBackend* GetDeviceBackend();
struct CachingAllocatorStats;
// The installed caching allocator's counters for `device` (all zero when no backend is installed).
CachingAllocatorStats DeviceCacheStats(int device);
// The installed backend; throws kUnimplemented naming `what` and `device` when there is none
// ("no GPU backend: build with the CUDA toolkit and run on a GPU machine").
DeviceBackend& RequireDeviceBackend(const std::string& what, int device);

}  // namespace tessel::memory
