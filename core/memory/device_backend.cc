// core/memory/device_backend.cc — the process's installed GPU backend and its caching allocator.
#include "core/memory/device_backend.h"

#include <mutex>

#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/stream.h"

namespace tessel::memory {
namespace {

struct Installed {
  std::mutex mu;
  std::unique_ptr<DeviceBackend> backend;
  std::unique_ptr<CachingAllocator> cache;
};

// Process-wide on purpose (one GPU runtime per process) and never destroyed: tensors freed during
// static destruction must still find their allocator.
Installed& GetInstalled() {
  static auto* installed = new Installed();
  return *installed;
}

}  // namespace

void InstallDeviceBackend(std::unique_ptr<DeviceBackend> backend) {
  TESSEL_CHECK(backend != nullptr, "InstallDeviceBackend: null backend");
  Installed& in = GetInstalled();
  std::lock_guard<std::mutex> lock(in.mu);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, in.backend == nullptr, "InstallDeviceBackend: the '",
                    in.backend ? in.backend->name() : "", "' backend is already installed (one per process)");
  in.backend = std::move(backend);
  in.cache = std::make_unique<CachingAllocator>(in.backend.get());
  CachingAllocator* cache = in.cache.get();
  DeviceAllocator a;
  a.alloc = [cache](int64_t nbytes, int index) {
    return cache->Allocate(index, nbytes, CurrentStream(Device::Cuda(index)));
  };
  a.free = [cache](void* p, int) { cache->Free(p); };
  a.describe = [cache](int index) { return cache->Describe(index); };
  a.empty_cache = [cache]() { cache->EmptyCache(); };
  RegisterDeviceAllocator(DeviceType::kCuda, std::move(a));
}

DeviceBackend* GetDeviceBackend() {
  Installed& in = GetInstalled();
  std::lock_guard<std::mutex> lock(in.mu);
  return in.backend.get();
}

CachingAllocatorStats DeviceCacheStats(int device) {
  Installed& in = GetInstalled();
  std::lock_guard<std::mutex> lock(in.mu);
  return in.cache ? in.cache->Stats(device) : CachingAllocatorStats{};
}

DeviceBackend& RequireDeviceBackend(const std::string& what, int device) {
  DeviceBackend* b = GetDeviceBackend();
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, b != nullptr, what, ": no GPU backend for cuda:", device,
                    " (build with the CUDA toolkit, link //core/memory:cuda_backend and run on a GPU machine)");
  return *b;
}

}  // namespace tessel::memory
