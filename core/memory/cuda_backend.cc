// core/memory/cuda_backend.cc — DeviceBackend over the CUDA runtime API.
#include "core/memory/cuda_backend.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "core/base/error.h"
#include "core/memory/device_backend.h"

namespace tessel::memory {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  TESSEL_FAIL(ErrorCode::kInternal, "CUDA ", what, " failed: ", cudaGetErrorString(e), " (", static_cast<int>(e),
              ")");
}

// Sets the current device for the calls that follow (the runtime's device is per host thread).
void Use(int device) { Check(cudaSetDevice(device), "cudaSetDevice"); }

cudaStream_t S(StreamHandle s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(EventHandle e) { return static_cast<cudaEvent_t>(e); }

class CudaBackend final : public DeviceBackend {
 public:
  std::string name() const override { return "cuda"; }
  int DeviceCount() override { return CudaDeviceCount(); }

  void* Malloc(int device, int64_t nbytes) override {
    Use(device);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(nbytes));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    Check(e, "cudaMalloc");
    return p;
  }
  void Free(int device, void* ptr) override {
    Use(device);
    Check(cudaFree(ptr), "cudaFree");
  }
  void* MallocHost(int64_t nbytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, static_cast<size_t>(nbytes));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    Check(e, "cudaMallocHost");
    return p;
  }
  void FreeHost(void* ptr) override { Check(cudaFreeHost(ptr), "cudaFreeHost"); }

  StreamHandle CreateStream(int device) override {
    Use(device);
    cudaStream_t s = nullptr;
    Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void DestroyStream(int device, StreamHandle stream) override {
    Use(device);
    Check(cudaStreamDestroy(S(stream)), "cudaStreamDestroy");
  }
  void SynchronizeStream(int device, StreamHandle stream) override {
    Use(device);
    Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize");
  }

  EventHandle CreateEvent(int device) override {
    Use(device);
    cudaEvent_t e = nullptr;
    Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void DestroyEvent(int device, EventHandle event) override {
    Use(device);
    Check(cudaEventDestroy(E(event)), "cudaEventDestroy");
  }
  void RecordEvent(int device, EventHandle event, StreamHandle stream) override {
    Use(device);
    Check(cudaEventRecord(E(event), S(stream)), "cudaEventRecord");
  }
  bool QueryEvent(int device, EventHandle event) override {
    Use(device);
    const cudaError_t e = cudaEventQuery(E(event));
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    Check(e, "cudaEventQuery");
    return true;
  }
  void SynchronizeEvent(int device, EventHandle event) override {
    Use(device);
    Check(cudaEventSynchronize(E(event)), "cudaEventSynchronize");
  }
  void StreamWaitEvent(int device, StreamHandle stream, EventHandle event) override {
    Use(device);
    Check(cudaStreamWaitEvent(S(stream), E(event), 0), "cudaStreamWaitEvent");
  }

  void MemcpyAsync(void* dst, const void* src, int64_t nbytes, CopyKind kind, int device,
                   StreamHandle stream) override {
    Use(device);
    const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                             : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                               : cudaMemcpyDefault;  // peer copies via UVA
    Check(cudaMemcpyAsync(dst, src, static_cast<size_t>(nbytes), k, S(stream)), "cudaMemcpyAsync");
  }
  void MemsetAsync(void* dst, int value, int64_t nbytes, int device, StreamHandle stream) override {
    Use(device);
    Check(cudaMemsetAsync(dst, value, static_cast<size_t>(nbytes), S(stream)), "cudaMemsetAsync");
  }
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool InstallCudaBackend() {
  static std::once_flag once;
  static bool installed = false;
  std::call_once(once, [] {
    if (GetDeviceBackend() != nullptr) return;  // another backend (a test's fake) is installed
    if (CudaDeviceCount() == 0) return;
    InstallDeviceBackend(std::make_unique<CudaBackend>());
    installed = true;
  });
  return installed;
}

}  // namespace tessel::memory
